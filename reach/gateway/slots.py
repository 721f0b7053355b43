"""Waiting for a free slot: tasks queued while every agent is at ``max_concurrency``.

Who is woken when a slot opens is the highest priority *aged* by time waited (``aging`` levels
a second), so a priority-0 task is served before it would be rejected and never starves under
a stream of priority-9 work. A waiter keeps its first queued time across wake-ups it loses.

Between callers, fairness comes first: the slot goes to the caller with the least unfinished
work (``usage``), and priority orders that caller's own waiters. One caller flooding a
capability therefore cannot push every other caller's calls past ``queue_wait`` into
``rejected``: each waiting caller gets its turn (priority across callers would be worth
nothing anyway, since any caller may claim 9).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reach.core import counts
from reach.core.tasks import Envelope
from reach.errors import ReachTimeout
from reach.gateway.clock import expires
from reach.ports import Clock


class Ticket:
    """A waiter's place in the queue: woken once (``set``: its ``wake`` is called) or given
    up (``cancel``: its ``stop``, if any, is called instead). Either way it is then done."""

    __slots__ = ("_wake", "_stop", "_done", "_count", "woken")

    def __init__(self, wake: Callable[[], None], stop: Callable[[], None] | None = None,
                 count: list[int] | None = None) -> None:
        self._wake = wake
        self._stop = stop
        self._done = False
        self._count = count  # its capability's count of live tickets (SlotQueue.waiting)
        self.woken = False  # ended by ``set``: a slot opened for it

    def done(self) -> bool:
        return self._done

    def _finish(self) -> None:
        self._done = True
        if self._count is not None:
            self._count[0] -= 1

    def set(self) -> None:
        if not self._done:
            self._finish()
            self.woken = True
            self._wake()

    def cancel(self) -> None:
        if not self._done:
            self._finish()
            if self._stop is not None:
                self._stop()


# A waiter in its caller's heap: the smallest first. ``priority + (now - since) × aging`` is
# the aged priority, and ``now × aging`` is the same for every waiter, so ordering by
# ``since × aging − priority`` (then the oldest, then arrival) needs no ``now``: one push and
# one pop per waiter, however long the queue (a backlog waits minutes, not 200 ms).
Waiter = tuple[float, float, int, Ticket]


@dataclass(slots=True)
class Queueing:
    """A pick's wait for a free slot, across its wake-ups (reach.gateway.driver ``try_slot``)."""

    exclude: frozenset[str]  # the agents tried, avoided while others have room
    deadline: float | None  # the task's (clock.now() time), if any
    since: float  # when it began: its age in the queue, kept across wake-ups
    until: float  # when ``queue_wait`` is over
    queued: bool  # in state ``queued`` already
    fair_wait: bool  # queue first behind a less busy caller's waiters
    backlog: bool = False  # a submit's wait: out of time, it ends dead (not ``rejected``)
    left: float = 0.0  # how long the next wait may last


def backlog_over(env: Envelope, q: Queueing, now: float, max_wait: float) -> ReachTimeout:
    """Why a submit's wait in the backlog for a slot ended without one (``now``: the
    clock's)."""
    waited = f"it waited {now - q.since:.1f}s in the backlog: every agent for " \
             f"{env.capability!r} stayed at its max_concurrency"
    if q.deadline is not None and q.deadline <= now:
        return ReachTimeout(f"{env.capability!r} did not complete within {env.timeout}s; "
                            f"{waited}", capability=env.capability)
    return ReachTimeout(f"{waited} for max_wait ({max_wait:.0f}s); replay it from the dead "
                        f"letters, or add agents", capability=env.capability)


class SlotQueue:
    def __init__(self, aging: float, clock: Clock) -> None:
        self.aging = aging
        self.clock = clock
        # capability → caller → its waiters, a heap (``Waiter``); done tickets are dropped as
        # they reach the top, or when they outnumber the live ones
        self._heaps: dict[str, dict[str, list[Waiter]]] = {}
        self._live: dict[str, list[int]] = {}  # capability → [its tickets not yet done]
        # capability → caller → its waiters not yet back (``leave``): a woken one counts
        # until it has taken its slot, so newcomers cannot take the slot it was woken for
        self._callers: dict[str, dict[str, int]] = {}
        # capability → caller → its waiters woken for a slot and not yet back: the slot is
        # theirs for that turn, not a newcomer's of the same caller (which would run ahead of
        # its own caller's older work)
        self._woken: dict[str, dict[str, int]] = {}
        self._seq = 0

    def enter(self, capability: str, priority: int, since: float, caller: str,
              wake: Callable[[], None], stop: Callable[[], None] | None = None) -> Ticket:
        """Queue a waiter: ``wake()`` is called when a slot opens for it. It counts as
        waiting for ``caller`` until it ``leave``s, whatever became of its ticket."""
        live = self._live.get(capability)
        if live is None:
            live = self._live[capability] = [0]
        live[0] += 1
        ticket = Ticket(wake, stop, live)
        heaps = self._heaps.setdefault(capability, {})
        heap = heaps.setdefault(caller, [])
        self._seq += 1
        heapq.heappush(heap, (since * self.aging - priority, since, self._seq, ticket))
        callers = self._callers.setdefault(capability, {})
        counts.add(callers, caller)
        if len(heap) > 64 and len(heap) > 2 * callers[caller]:  # mostly given up: compact
            heap[:] = [w for w in heap if not w[3].done()]
            heapq.heapify(heap)
        return ticket

    def leave(self, capability: str, caller: str, woken: bool = False) -> None:
        """A waiter of ``caller`` is back (``woken``, given up or out of time)."""
        for table in (self._callers, self._woken) if woken else (self._callers,):
            callers = table.get(capability)
            if callers is not None:
                counts.drop(callers, caller)
                if not callers:
                    del table[capability]

    async def wait(self, capability: str, priority: int, since: float, limit: float,
                   caller: str = "") -> None:
        """Wait up to ``limit`` seconds to be woken (returns either way)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        def stop() -> None:
            fut.cancel()

        ticket = self.enter(capability, priority, since, caller, wake, stop)
        try:
            await expires(self.clock, fut, limit)  # leaves ``fut`` done whichever way it ends
        finally:
            ticket.cancel()  # (out of time: no later wake is spent on it)
            self.leave(capability, caller, ticket.woken)

    def yields_to(self, capability: str, caller: str, usage: Callable[[str], int]) -> bool:
        """Whether a newcomer of ``caller`` must queue instead of taking a free slot first:
        behind waiters of a less busy caller (costs as many callers as are waiting), or
        behind its own caller's waiter woken for that slot and not yet back."""
        woken = self._woken.get(capability)
        if woken and caller in woken:  # its own older waiter was just given a slot
            return True
        callers = self._callers.get(capability)
        if not callers:
            return False
        mine = usage(caller)
        return any(usage(other) < mine for other in callers if other != caller)

    def wake(self, capabilities: Iterable[str], now: float,
             usage: Callable[[str], int] | None = None) -> None:
        """Wake the most deserving waiter of each capability: of the caller with the least
        ``usage`` among those waiting, the highest aged priority (``now`` is not needed to
        rank them: see ``Waiter``)."""
        for cap in capabilities:
            heaps = self._heaps.get(cap)
            if not heaps:
                continue
            for caller in list(heaps):
                heap = heaps[caller]
                while heap and heap[0][3].done():
                    heapq.heappop(heap)
                if not heap:
                    del heaps[caller]
            if not heaps:
                del self._heaps[cap]
                continue
            pool: Iterable[str] = heaps
            if usage is not None and len(heaps) > 1:
                use = {caller: usage(caller) for caller in heaps}
                least = min(use.values())
                pool = [caller for caller in heaps if use[caller] == least]
            best = min(pool, key=lambda caller: heaps[caller][0][:3])
            heapq.heappop(heaps[best])[3].set()
            counts.add(self._woken.setdefault(cap, {}), best)

    def capabilities(self) -> list[str]:
        """The capabilities that have (or recently had) waiters."""
        return list(self._heaps)

    def waiting(self, capability: str) -> int:
        """Its waiters not yet woken nor given up."""
        live = self._live.get(capability)
        return 0 if live is None else live[0]

    def cancel_all(self) -> None:
        for heaps in self._heaps.values():
            for heap in heaps.values():
                for waiter in heap:
                    waiter[3].cancel()
        self._heaps.clear()
        self._woken.clear()
