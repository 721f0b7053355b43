"""Every attempt's deadline in one heap on the clock, served by one clock timer.

A call has deadlines (its ack and completion) that nearly always end cancelled, a millisecond
later, when the answer comes. A loop timer each costs the loop a ``TimerHandle`` and a push
into its own heap, where cancelled handles stay until they are swept and every push compares
handles in Python (``TimerHandle.__lt__``: some 26 calls per call at one in flight). Here a
deadline is an entry in one heap of ``(when, seq, entry)`` tuples, compared in C, and a single
clock timer is armed for the soonest: a new deadline later than it (the common case: every
call's deadline is "now + the same timeout") arms nothing. DESIGN.md: "one deadline structure
on the ``Clock``".
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable

from reach.ports import Clock, Timer

log = logging.getLogger("reach.deadlines")
#: Cancelled entries are dropped all at once when they are more than this many and more than
#: the live ones (else each leaves when it reaches the top of the heap).
COMPACT_AFTER = 256
_NEVER = float("inf")


class Deadline:
    """One deadline; ``cancel`` it when what it guards has ended (a ``ports.Timer``)."""

    __slots__ = ("fn", "_owner")

    def __init__(self, fn: Callable[[], None], owner: Deadlines) -> None:
        self.fn: Callable[[], None] | None = fn
        self._owner = owner

    def cancel(self) -> None:
        if self.fn is not None:
            self.fn = None
            self._owner.dead += 1


class Deadlines:
    """``call_at`` for many short-lived deadlines over one timer of ``clock``.

    A deadline fires no earlier than its ``when`` on ``clock``, in order of ``when`` (then of
    arrival). The clock's timer may outlive the last live deadline (it then fires once and
    finds nothing); ``close`` cancels it and every deadline left."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Deadline]] = []
        self._seq = itertools.count()
        self._timer: Timer | None = None
        self._armed = _NEVER
        self.dead = 0  # cancelled entries still in the heap

    def call_at(self, when: float, fn: Callable[[], None]) -> Deadline:
        entry = Deadline(fn, self)
        heapq.heappush(self._heap, (when, next(self._seq), entry))
        if when < self._armed:
            self._arm(when)
        return entry

    def pending(self) -> int:
        """Deadlines neither fired nor cancelled."""
        return len(self._heap) - self.dead

    def close(self) -> None:
        """Cancel the clock's timer and forget every deadline."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed = _NEVER
        for _, _, entry in self._heap:
            entry.fn = None
        self._heap.clear()
        self.dead = 0

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = self._clock.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed = None, _NEVER
        heap = self._heap
        now = self._clock.now()
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)[2]
            fn = entry.fn
            if fn is None:
                self.dead -= 1
                continue
            entry.fn = None
            try:
                fn()
            except Exception:  # one deadline's bug must not strand the others
                log.exception("a deadline's callback failed")
        while heap and heap[0][2].fn is None:  # cancelled ones on top: no need to wake
            heapq.heappop(heap)
            self.dead -= 1
        if self.dead > COMPACT_AFTER and self.dead * 2 > len(heap):
            self._heap = heap = [item for item in heap if item[2].fn is not None]
            heapq.heapify(heap)
            self.dead = 0
        if heap and heap[0][0] < self._armed:
            self._arm(heap[0][0])
