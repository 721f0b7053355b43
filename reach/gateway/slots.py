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

from reach.core import counts
from reach.gateway.clock import expires
from reach.ports import Clock

Waiter = tuple[int, float, str, asyncio.Future[None]]


class SlotQueue:
    def __init__(self, aging: float, clock: Clock) -> None:
        self.aging = aging
        self.clock = clock
        # capability → (priority, first queued at, caller, waker)
        self._waiters: dict[str, list[Waiter]] = {}
        # capability → caller → its waiters not yet back from ``wait`` (a woken one counts
        # until it has taken its slot, so newcomers cannot take the slot it was woken for)
        self._callers: dict[str, dict[str, int]] = {}

    async def wait(self, capability: str, priority: int, since: float, limit: float,
                   caller: str = "") -> None:
        """Wait up to ``limit`` seconds to be woken (returns either way)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(capability, []).append((priority, since, caller, fut))
        callers = self._callers.setdefault(capability, {})
        counts.add(callers, caller)
        try:
            await expires(self.clock, fut, limit)  # leaves ``fut`` done whichever way it ends
        finally:
            counts.drop(callers, caller)
            if not callers and self._callers.get(capability) is callers:
                del self._callers[capability]

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
            best[3].set_result(None)

    def capabilities(self) -> list[str]:
        """The capabilities that have (or recently had) waiters."""
        return list(self._waiters)

    def waiting(self, capability: str) -> int:
        return sum(1 for w in self._waiters.get(capability, ()) if not w[3].done())

    def cancel_all(self) -> None:
        for waiters in self._waiters.values():
            for _, _, _, fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
