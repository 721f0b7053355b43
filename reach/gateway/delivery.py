"""One attempt in flight: the future its outcome arrives on, and the timer of its deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from reach.core.flight import Flight
from reach.ports import Clock, Timers


class Delivery:
    """One attempt in flight at one agent: a future and one timer. It is the ``ports.Reply``
    an ``AgentLink`` reports to; when to give the attempt up is decided by its
    ``reach.core.flight.Flight`` (the ack and completion deadlines, at most once for work that
    is not idempotent), and this class only arms the timer it asks for."""

    __slots__ = ("fut", "flight", "_timer", "_clock", "_timers", "on_chunk", "on_ack",
                 "on_ok")

    def __init__(self, clock: Clock, ack_timeout: float,
                 completion: float, on_chunk: Callable[[int, Any], None] | None,
                 on_ack: Callable[[], None] | None = None,
                 on_ok: Callable[[Any], None] | None = None, *,
                 idempotent: bool = True, limit: float | None = None,
                 timers: Timers | None = None) -> None:
        self._clock = clock
        self._timers = clock if timers is None else timers  # the gateway's Deadlines
        self.fut: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        now = clock.now()
        self.flight = flight = Flight(now + ack_timeout, now + completion, completion,
                                      idempotent, limit)
        self._timer = self._arm(flight.due)
        self.on_chunk = on_chunk
        self.on_ack = on_ack
        self.on_ok = on_ok  # the answer, at once: the caller need not wait for bookkeeping

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
        if self.flight.acked or self.fut.done():
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
        if not self.fut.done():
            if kind == "ok" and self.on_ok is not None:
                self.on_ok(payload)
            self.fut.set_result((kind, payload))

    def _expire(self, due: float) -> None:
        if self.fut.done():
            return
        step = self.flight.expire(due, self._clock.now())
        if isinstance(step, str):
            self.fut.set_result((step, None))
        else:
            self._timer = self._arm(step)
