"""The coroutines a part of the coordinator owns: started in one place, drained or cancelled
together at stop. (Not an ``asyncio.TaskGroup``: one failing driver must not cancel every
other task, and a stop gives running tasks a grace period before it cancels them.)

A crew also holds *runs*: work carried out by callbacks, without a coroutine (a task's life
on its common path, reach.gateway.runs). A run is named like a coroutine, counts in the
crew's size, is cancelled by name and drained at stop the same way; it tells the crew when
it ends (``release``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol


class Cancellable(Protocol):
    def cancel(self) -> Any: ...


class Crew:
    __slots__ = ("_tasks", "_runs", "_idle")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runs: dict[str, Cancellable] = {}
        self._idle: asyncio.Future[None] | None = None  # set once no run is left (at stop)

    def __len__(self) -> int:
        return len(self._tasks) + len(self._runs)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None
              ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def hold(self, name: str, run: Cancellable) -> None:
        """Count ``run`` (work carried out by callbacks) until it ``release``s itself."""
        self._runs[name] = run

    def release(self, name: str, run: Cancellable) -> None:
        if self._runs.get(name) is run:
            del self._runs[name]
            if not self._runs and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)

    def cancel_named(self, names: set[str]) -> int:
        """Cancel the running tasks and runs of these names; how many."""
        hit = [t for t in self._tasks if t.get_name() in names]
        for task in hit:
            task.cancel()
        runs = [run for name, run in self._runs.items() if name in names]
        for run in runs:
            run.cancel()
        return len(hit) + len(runs)

    async def stop(self, grace: float = 0.0) -> None:
        """Give the running tasks and runs ``grace`` seconds to end, then cancel the rest
        and wait for the tasks to unwind."""
        loop = asyncio.get_running_loop()
        until = loop.time() + grace
        while self._tasks or self._runs:
            left = until - loop.time()
            if left <= 0:
                break
            waiting: set[asyncio.Future[Any]] = set(self._tasks)
            if self._runs:  # (a run may hand its work to a task meanwhile: look again)
                self._idle = loop.create_future()
                waiting.add(self._idle)
            await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        for run in list(self._runs.values()):
            run.cancel()
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
