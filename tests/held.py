"""A handler for tests of cancellation: it holds its slot until the coordinator has its agent
stop it, noting when it started and when it was stopped.

It never finishes by itself (it waits on an event nobody sets, not a long sleep), so a test
whose cancel never reaches the agent fails at its own wait for ``stopped``.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Held:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._never = asyncio.Event()

    async def run(self, **params: Any) -> Any:
        """The handler (``agent.capability(name, ...)(held.run)``), any params."""
        self.started.set()
        try:
            await self._never.wait()
        except asyncio.CancelledError:
            self.stopped.set()
            raise
