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

    __slots__ = ("_wake", "_stop", "_done")

    def __init__(self, wake: Callable[[], None],
                 stop: Callable[[], None] | None = None) -> None:
        self._wake = wake
        self._stop = stop
        self._done = False

    def done(self) -> bool:
        return self._done

    def set(self) -> None:
        if not self._done:
            self._done = True
            self._wake()

    def cancel(self) -> None:
        if not self._done:
            self._done = True
            if self._stop is not None:
                self._stop()


Waiter = tuple[int, float, str, Ticket]


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
        # capability → (priority, first queued at, caller, ticket)
        self._waiters: dict[str, list[Waiter]] = {}
        # capability → caller → its waiters not yet back (``leave``): a woken one counts
        # until it has taken its slot, so newcomers cannot take the slot it was woken for
        self._callers: dict[str, dict[str, int]] = {}

    def enter(self, capability: str, priority: int, since: float, caller: str,
              wake: Callable[[], None], stop: Callable[[], None] | None = None) -> Ticket:
        """Queue a waiter: ``wake()`` is called when a slot opens for it. It counts as
        waiting for ``caller`` until it ``leave``s, whatever became of its ticket."""
        ticket = Ticket(wake, stop)
        self._waiters.setdefault(capability, []).append((priority, since, caller, ticket))
        counts.add(self._callers.setdefault(capability, {}), caller)
        return ticket

    def leave(self, capability: str, caller: str) -> None:
        """A waiter of ``caller`` is back (woken, given up or out of time)."""
        callers = self._callers.get(capability)
        if callers is not None:
            counts.drop(callers, caller)
            if not callers:
                del self._callers[capability]

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
            self.leave(capability, caller)

    def yields_to(self, capability: str, caller: str, usage: Callable[[str], int]) -> bool:
        """Whether a newcomer of ``caller`` must queue behind waiters of a less busy caller
        instead of taking a free slot first (costs as many callers as are waiting)."""
        callers = self._callers.get(capability)
        if not callers:
            return False
        mine = usage(caller)
        return any(usage(other) < mine for other in callers if other != caller)

    def wake(self, capabilities: Iterable[str], now: float,
             usage: Callable[[str], int] | None = None) -> None:
        """Wake the most deserving waiter of each capability: of the caller with the least
        ``usage`` among those waiting, the highest aged priority."""
        for cap in capabilities:
            waiters = self._waiters.get(cap)
            if not waiters:
                continue
            live = [w for w in waiters if not w[3].done()]
            if not live:
                del self._waiters[cap]
                continue
            if usage is not None and any(w[2] != live[0][2] for w in live):
                use = {caller: usage(caller) for caller in {w[2] for w in live}}
                least = min(use.values())
                pool = [w for w in live if use[w[2]] == least]
            else:
                pool = live
            best = max(pool, key=lambda w: (w[0] + (now - w[1]) * self.aging, -w[1]))
            live.remove(best)
            self._waiters[cap] = live
            best[3].set()

    def capabilities(self) -> list[str]:
        """The capabilities that have (or recently had) waiters."""
        return list(self._waiters)

    def waiting(self, capability: str) -> int:
        return sum(1 for w in self._waiters.get(capability, ()) if not w[3].done())

    def cancel_all(self) -> None:
        for waiters in self._waiters.values():
            for _, _, _, ticket in waiters:
                ticket.cancel()
        self._waiters.clear()
