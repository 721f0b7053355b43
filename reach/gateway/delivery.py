"""One attempt in flight: the future its outcome arrives on, and its two deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from reach.ports import Clock


class Delivery:
    """One attempt in flight at one agent: a future, an ack deadline and a completion deadline.
    It is the ``ports.Reply`` an ``AgentLink`` reports to.

    One timer serves both deadlines (whichever is due first, re-armed for the other). When it
    fires late because the loop itself stalled (a GC pause, a busy neighbour), the answer may
    already sit unread in the socket: it then waits once more as long as it was late before
    giving up, so a coordinator stall is not blamed on the agent.
    """

    __slots__ = ("fut", "acked", "_timer", "_clock", "_ack_at", "_done_at", "_completion",
                 "_extended", "on_chunk", "on_ack", "on_ok")
    LAG_SLACK = 0.005

    def __init__(self, clock: Clock, ack_timeout: float,
                 completion: float, on_chunk: Callable[[int, Any], None] | None,
                 on_ack: Callable[[], None] | None = None,
                 on_ok: Callable[[Any], None] | None = None) -> None:
        self._clock = clock
        self.fut: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self.acked = False
        self._extended = False
        now = clock.now()
        self._completion = completion
        self._ack_at, self._done_at = now + ack_timeout, now + completion
        self._timer = self._arm(min(self._ack_at, self._done_at))
        self.on_chunk = on_chunk
        self.on_ack = on_ack
        self.on_ok = on_ok  # the answer, at once: the caller need not wait for bookkeeping

    def _arm(self, due: float) -> Any:
        return self._clock.call_at(due, partial(self._expire, due))

    def chunk(self, seq: int, data: Any) -> None:
        if self.on_chunk is not None:
            self.on_chunk(seq, data)

    def ack(self) -> None:
        """The agent has the work: from now on only the completion deadline counts."""
        if self.acked or self.fut.done():
            return
        self.acked = True
        done_at = self._clock.now() + self._completion
        if done_at > self._done_at + self.LAG_SLACK:  # a late ack: the clock starts now
            self._done_at = done_at
            self._timer.cancel()
            self._timer = self._arm(done_at)
        if self.on_ack is not None:
            self.on_ack()

    def resolve(self, kind: str, payload: Any = None) -> None:
        """kind: ok | error (payload = wire error) | lost (connection went away)."""
        self._timer.cancel()  # also when the waiter was cancelled: no timer outlives it
        if not self.fut.done():
            if kind == "ok" and self.on_ok is not None:
                self.on_ok(payload)
            self.fut.set_result((kind, payload))

    def _expire(self, due: float) -> None:
        if self.fut.done():
            return
        now = self._clock.now()
        late = now - due
        if late > self.LAG_SLACK and not self._extended:
            self._extended = True
            self._timer = self._arm(now + late)
            return
        if self.acked and now < self._done_at:  # the ack deadline passed, acknowledged
            self._timer = self._arm(self._done_at)
            return
        if not self.acked and now < self._ack_at and now < self._done_at:
            self._timer = self._arm(min(self._ack_at, self._done_at))
            return
        # Unacknowledged past the ack deadline: never delivered. Anything else: too slow.
        kind = "undelivered" if not self.acked and now >= self._ack_at else "timeout"
        self.fut.set_result((kind, None))
