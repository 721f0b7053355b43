"""The event bus: every task transition, agent change, breaker change and admin action, once.

Two kinds of consumer:

- **listeners** are plain functions called inline as an event is published (JSON logs).
  They must be cheap and must not raise; a listener that raises is removed, not retried.
- **subscriptions** buffer events for a reader on another task (the admin feed). Each buffer is
  bounded: when a reader falls behind, its oldest events are dropped and counted, so a slow
  dashboard never slows routing. A reader that sees ``dropped`` should re-read a snapshot.

With nobody listening, ``publish`` returns before building anything: the hot path pays one
attribute check.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reach.gateway.clock import within
from reach.ports import Clock

log = logging.getLogger("reach.events")

TASK, AGENT, BREAKER, DEAD_LETTER, ADMIN = "task", "agent", "breaker", "dead_letter", "admin"
PROBE = "probe"  # an agent's probes suspected or restored it (reach.gateway.probing)


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    at: float
    kind: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "kind": self.kind, **self.data}


class Subscription:
    """A bounded buffer of events for one reader; see the module docstring."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._buffer: deque[Event] = deque()
        self._maxsize = maxsize
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def _put(self, event: Event) -> None:
        if len(self._buffer) >= self._maxsize:
            self._buffer.popleft()
            self.dropped += 1
        self._buffer.append(event)
        self._ready.set()

    def drain(self) -> list[Event]:
        """Every buffered event, oldest first; empties the buffer."""
        out = list(self._buffer)
        self._buffer.clear()
        self._ready.clear()
        return out

    async def wait(self, timeout: float) -> bool:
        """Wait until an event is buffered or ``timeout`` (of the bus's clock) passes; True
        if one is."""
        if self._buffer:
            return True
        return await within(self._bus.clock, self._ready.wait(), timeout)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._bus._subs.remove(self)


class EventBus:
    """Fan-out of coordinator events; the clock stamps each one (its wall time) and times
    the readers' waits."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._seq = 0
        self._subs: list[Subscription] = []
        self._listeners: list[Callable[[Event], None]] = []

    @property
    def active(self) -> bool:
        """Is anybody listening? Publishers may skip building an event's fields when not."""
        return bool(self._subs or self._listeners)

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        if not (self._subs or self._listeners):
            return
        self._seq += 1
        event = Event(self._seq, self.clock.wall(), kind, data)
        for sub in self._subs:
            sub._put(event)
        for fn in tuple(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("event listener %r failed and was removed", fn)
                self._listeners.remove(fn)

    def subscribe(self, maxsize: int = 10_000) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.append(sub)
        return sub

    def listen(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``fn(event)`` inline for every event; returns a function that stops it."""
        self._listeners.append(fn)

        def stop() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)
        return stop


def log_json(event: Event) -> None:
    """One JSON line per task transition, agent or breaker change and admin action (logger
    ``reach.events``; ``json_logs=True`` listens with it)."""
    if log.isEnabledFor(logging.INFO):
        log.info(json.dumps({"event": event.kind, "timestamp": event.at, **event.data},
                            default=str, ensure_ascii=False))
