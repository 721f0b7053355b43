"""The coroutines a part of the coordinator owns: started in one place, drained or cancelled
together at stop. (Not an ``asyncio.TaskGroup``: one failing driver must not cancel every
other task, and a stop gives running tasks a grace period before it cancels them.)"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Crew:
    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None
              ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_named(self, names: set[str]) -> int:
        """Cancel the running tasks of these names (spawned with ``name``); how many."""
        hit = [t for t in self._tasks if t.get_name() in names]
        for task in hit:
            task.cancel()
        return len(hit)

    async def stop(self, grace: float = 0.0) -> None:
        """Give the running tasks ``grace`` seconds to end, then cancel the rest and wait
        for them to unwind."""
        if not self._tasks:
            return
        pending: set[asyncio.Task[Any]] = set(self._tasks)
        if grace > 0:
            _, pending = await asyncio.wait(pending, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
