"""``Context``: what a handler knows about the task it runs, and a way to call on from inside it.

A handler that declares a ``Context`` parameter gets the task id, trace id, idempotency key and
deadline; calls made through ``ctx.call`` join the same trace (as children of this task) and
inherit what is left of the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reach.core.tasks import SubmitRequest
from reach.errors import ReachTimeout
from reach.sdk.handle import Handle

if TYPE_CHECKING:
    from reach.sdk.client import Client


@dataclass(slots=True)
class Context:
    task_id: str
    trace_id: str
    idempotency_key: str
    capability: str
    caller: str = ""
    attempt: int = 0
    parent_task_id: str | None = None
    traceparent: str | None = None
    deadline: float | None = None  # time.monotonic() value, None when the caller set none
    # The coordinator gave this attempt up (its caller cancelled the task, it timed out, a
    # hedge won elsewhere): an async handler is also cancelled; a thread handler, which
    # cannot be, should look here between steps and stop.
    cancelled: bool = False
    _client: Callable[[], Awaitable[Client]] | None = field(default=None, repr=False)

    def time_left(self) -> float | None:
        """Seconds left before the caller's deadline (None: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    async def call(self, capability: str, params: dict[str, Any] | None = None, *,
                   timeout: float | None = None, idempotency_key: str | None = None,
                   priority: int = 5, max_retries: int | None = None,
                   hedge: bool | None = None) -> Any:
        """Call another capability as part of this trace, within the remaining deadline."""
        handle = await self.submit(capability, params, timeout=timeout,
                                   idempotency_key=idempotency_key, priority=priority,
                                   max_retries=max_retries, hedge=hedge)
        return await handle.result()

    async def submit(self, capability: str, params: dict[str, Any] | None = None, *,
                     timeout: float | None = None, idempotency_key: str | None = None,
                     priority: int = 5, max_retries: int | None = None,
                     hedge: bool | None = None) -> Handle:
        """Submit another capability's task as a child of this one, in the same trace."""
        if self._client is None:
            raise RuntimeError("this context has no connection to call through")
        left = self.time_left()
        if left is not None:
            if left <= 0:
                raise ReachTimeout(f"no time left for {capability!r}: this task's deadline "
                                   f"({self.task_id}) has passed", task_id=self.task_id)
            timeout = left if timeout is None else min(timeout, left)
        client = await self._client()
        handle, _ = await client._submit(SubmitRequest(
            capability, params or {}, idempotency_key=idempotency_key, priority=priority,
            timeout=timeout, max_retries=max_retries, trace_id=self.trace_id,
            parent_task_id=self.task_id, traceparent=self.traceparent, hedge=hedge))
        return handle
