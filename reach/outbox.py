"""An outbound queue per websocket: post frames from anywhere without awaiting, sent in order.

Results are pushed from completion callbacks, which cannot await; the outbox turns a ``post`` into
an ordered send by one writer task that the connection owns and stops.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from websockets.exceptions import ConnectionClosed


class Outbox:
    def __init__(self, ws: Any, name: str = "outbox") -> None:
        self.ws = ws
        self._queue: deque[str] = deque()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name=name)
        self.closed = False

    def post(self, text: str) -> bool:
        """Queue one frame; False once the connection is gone."""
        if self.closed:
            return False
        self._queue.append(text)
        self._wake.set()
        return True

    async def _pump(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    await self.ws.send(self._queue.popleft())
        except ConnectionClosed:
            self.closed = True

    async def aclose(self) -> None:
        """Stop the writer; frames still queued are dropped with the connection."""
        self.closed = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            if (current := asyncio.current_task()) is not None and current.cancelling():
                raise
