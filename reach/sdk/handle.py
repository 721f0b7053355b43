"""``Handle``: an accepted task, by id, and a way to wait for its outcome.

    handle = await client.submit("report.generate", {...}, idempotency_key="k1")
    result = await handle.result(timeout=15)     # handle.task_id, handle.trace_id
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from reach.errors import ReachError, ReachTimeout
from reach.sdk.fallback import Fallback, unwrap


class Tasks(Protocol):
    """What a handle needs of the client that made it."""

    async def status(self, task_id: str) -> dict[str, Any]: ...

    async def cancel(self, task_id: str) -> dict[str, Any]: ...

    async def _subscribe(self, task_id: str) -> asyncio.Future[Any]: ...


class Handle:
    """An accepted task: its ids, and its outcome when it comes."""

    def __init__(self, client: Tasks, task_id: str, trace_id: str, duplicate: bool,
                 outcome: asyncio.Future[Any] | None) -> None:
        self.client = client
        self.task_id = task_id
        self.trace_id = trace_id
        self.duplicate = duplicate
        self._outcome = outcome
        self.fallback: Fallback | None = None  # set by result() when the result is a fallback

    async def result(self, timeout: float | None = None) -> Any:
        """The task's result; raises its ``ReachError`` if it failed, ``ReachTimeout`` if late.

        A chain's head (``submit(..., then=...)``) answers with its last step's result, or
        the error of the step that failed (``details["chain"]`` names it; after that step's
        dead letter is replayed, calling ``result()`` again follows the chain on)."""
        if self._outcome is None:
            self._outcome = await self.client._subscribe(self.task_id)
        try:
            async with asyncio.timeout(timeout):
                value, self.fallback = unwrap(await asyncio.shield(self._outcome))
                return value
        except ReachError as exc:
            if "chain" in exc.details:  # a chain's step failed: its dead letter may be
                self._outcome = None    # replayed, so the next call asks again
            raise  # the task's own error (a remote timeout included), not our wait's
        except TimeoutError:
            raise ReachTimeout(f"task {self.task_id} has no outcome after {timeout}s; it is "
                               f"still tracked: call handle.result() or client.status() again",
                               task_id=self.task_id) from None

    async def status(self) -> dict[str, Any]:
        return await self.client.status(self.task_id)

    async def cancel(self) -> dict[str, Any]:
        """Cancel the task: it ends in state ``cancelled`` and its agent is told to stop
        (``result()`` then raises ``Cancelled``). A task that has ended already stays as it
        ended. Returns the task's view as it is after the cancel."""
        return await self.client.cancel(self.task_id)

    def __repr__(self) -> str:
        return f"Handle(task_id={self.task_id!r}, trace_id={self.trace_id!r})"


def consume(fut: asyncio.Future[Any]) -> None:
    """A done-callback for an outcome future: one nobody awaited must not log "exception was
    never retrieved"."""
    if not fut.cancelled():
        fut.exception()
