"""Waiting for a free slot: tasks queued while every agent is at ``max_concurrency``.

Who is woken when a slot opens is the highest priority *aged* by time waited (``aging`` levels
a second), so a priority-0 task is served before it would be rejected and never starves under
a stream of priority-9 work. A waiter keeps its first queued time across wake-ups it loses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class SlotQueue:
    def __init__(self, aging: float) -> None:
        self.aging = aging
        # capability → (priority, first queued at, waker)
        self._waiters: dict[str, list[tuple[int, float, asyncio.Future[None]]]] = {}

    async def wait(self, capability: str, priority: int, since: float, limit: float) -> None:
        """Wait up to ``limit`` seconds to be woken (returns either way)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(capability, []).append((priority, since, fut))
        try:
            async with asyncio.timeout(limit):
                await fut
        except TimeoutError:
            pass
        finally:
            if not fut.done():
                fut.cancel()

    def wake(self, capabilities: Iterable[str], now: float) -> None:
        """Wake the most deserving waiter of each capability."""
        for cap in capabilities:
            waiters = self._waiters.get(cap)
            if not waiters:
                continue
            live = [w for w in waiters if not w[2].done()]
            if not live:
                del self._waiters[cap]
                continue
            best = max(live, key=lambda w: (w[0] + (now - w[1]) * self.aging, -w[1]))
            live.remove(best)
            self._waiters[cap] = live
            best[2].set_result(None)

    def waiting(self, capability: str) -> int:
        return sum(1 for w in self._waiters.get(capability, ()) if not w[2].done())

    def cancel_all(self) -> None:
        for waiters in self._waiters.values():
            for _, _, fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
