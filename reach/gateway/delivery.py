"""One attempt in flight: how it ended, who hears it, and the timer of its deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from reach.core.flight import Flight
from reach.ports import Clock, Timers


class Delivery:
    """One attempt in flight at one agent: its outcome and one timer. It is the
    ``ports.Reply`` an ``AgentLink`` reports to; when to give the attempt up is decided by its
    ``reach.core.flight.Flight`` (the ack and completion deadlines, at most once for work that
    is not idempotent), and this class only arms the timer it asks for.

    How it ended is ``outcome`` (kind, payload), once. Who carries the attempt on hears it
    through ``on_end``, at the next turn of the loop (a link may resolve it from inside its
    own bookkeeping, such as a lost connection's walk over its deliveries), or by awaiting
    ``fut``, a future made only when asked for."""

    __slots__ = ("outcome", "flight", "_fut", "_timer", "_clock", "_timers", "_loop",
                 "on_chunk", "on_ack", "on_ok", "on_end")

    def __init__(self, clock: Clock, ack_timeout: float,
                 completion: float, on_chunk: Callable[[int, Any], None] | None,
                 on_ack: Callable[[], None] | None = None,
                 on_ok: Callable[[Any], None] | None = None, *,
                 idempotent: bool = True, limit: float | None = None,
                 timers: Timers | None = None) -> None:
        self._clock = clock
        self._timers = clock if timers is None else timers  # the gateway's Deadlines
        self._loop = asyncio.get_running_loop()
        self.outcome: tuple[str, Any] | None = None
        self._fut: asyncio.Future[tuple[str, Any]] | None = None
        now = clock.now()
        self.flight = flight = Flight(now + ack_timeout, now + completion, completion,
                                      idempotent, limit)
        self._timer = self._arm(flight.due)
        self.on_chunk = on_chunk
        self.on_ack = on_ack
        self.on_ok = on_ok  # the answer, at once: the caller need not wait for bookkeeping
        self.on_end: Callable[[str, Any], None] | None = None

    @property
    def fut(self) -> asyncio.Future[tuple[str, Any]]:
        """A future of ``outcome`` (made on first use)."""
        if self._fut is None:
            self._fut = self._loop.create_future()
            if self.outcome is not None:
                self._fut.set_result(self.outcome)
        return self._fut

    @property
    def acked(self) -> bool:
        """Whether the agent said it has the work (``flight.acked``, read without a call)."""
        return self.flight.acked

    def _arm(self, due: float) -> Any:
        return self._timers.call_at(due, partial(self._expire, due))

    def chunk(self, seq: int, data: Any) -> None:
        if self.on_chunk is not None:
            self.on_chunk(seq, data)

    def ack(self) -> None:
        """The agent has the work (an ack, a chunk or an outcome said so)."""
        if self.flight.acked or self.outcome is not None:
            return
        moved = self.flight.ack(self._clock.now())
        if moved is not None:
            self._timer.cancel()
            self._timer = self._arm(moved)
        if self.on_ack is not None:
            self.on_ack()

    def resolve(self, kind: str, payload: Any = None) -> None:
        """kind: ok | error (payload = wire error) | lost (connection went away) | unsent
        (never handed to the agent) | undelivered | full (a link's proof it did not arrive)."""
        self._timer.cancel()  # also when the waiter was cancelled: no timer outlives it
        if self.outcome is None:
            if kind == "ok" and self.on_ok is not None:
                self.on_ok(payload)
            self._end(kind, payload)

    def _end(self, kind: str, payload: Any) -> None:
        self.outcome = outcome = (kind, payload)
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(outcome)
        if self.on_end is not None:
            self._loop.call_soon(self.on_end, kind, payload)

    def _expire(self, due: float) -> None:
        if self.outcome is not None:
            return
        step = self.flight.expire(due, self._clock.now())
        if isinstance(step, str):
            self._end(step, None)
        else:
            self._timer = self._arm(step)
