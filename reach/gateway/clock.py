"""The real clock (the event loop's monotonic time, the system's wall time) and waits bounded
by any ``ports.Clock``: the gateway times everything through these, so a fake clock drives it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from reach.ports import Clock, Timer


class LoopClock:
    """``ports.Clock`` on the running event loop; ``wall`` is injectable
    (``Reach.start(clock=)``). On the hot path (several reads per call): ``wall`` is the
    wall-time function itself, ``now`` the loop's own clock, bound at first use."""

    __slots__ = ("wall", "now", "_loop")

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self._loop: asyncio.AbstractEventLoop | None = None
        # ``now`` is the loop's own ``time`` once a loop is running (one call, not three);
        # until then it finds the loop.
        self.now: Callable[[], float] = self._first_now

    def _bound(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
            # asyncio's own loops tell the time by ``time.monotonic`` through a Python method:
            # read it directly (one C call instead of two calls, ~9 reads a call). Any other
            # loop (uvloop, a test's) keeps its own ``time``.
            plain = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
            self.now = time.monotonic if plain else loop.time
        return loop

    def _first_now(self) -> float:
        return self._bound().time()

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        return self._bound().call_at(when, fn)

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)


async def expires(clock: Clock, fut: asyncio.Future[Any], limit: float) -> bool:
    """Await a future this caller owns for at most ``limit`` seconds of ``clock``; at the
    limit it is cancelled and False returned. (One turn of the loop fewer than ``within``:
    the future's result wakes the waiter directly.)"""
    if fut.done():
        return not fut.cancelled()
    expired = False

    def expire() -> None:
        nonlocal expired
        if not fut.done():
            expired = True
            fut.cancel()

    timer = clock.call_at(clock.now() + max(0.0, limit), expire)
    try:
        await fut
        return True
    except asyncio.CancelledError:
        if expired:
            return False
        raise
    finally:
        timer.cancel()


async def within(clock: Clock, waitable: Awaitable[Any], limit: float) -> bool:
    """Wait for ``waitable`` at most ``limit`` seconds of ``clock``; True if it completed.
    A future is left running when the time is up (its owner decides what to do with it); a
    coroutine is cancelled."""
    fut = asyncio.ensure_future(waitable)
    if fut.done():
        return True
    if limit <= 0:
        if not asyncio.isfuture(waitable):
            fut.cancel()
        return False
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bool] = loop.create_future()

    def done(_f: object) -> None:
        if not waiter.done():
            waiter.set_result(True)

    def expire() -> None:
        if not waiter.done():
            waiter.set_result(False)

    fut.add_done_callback(done)
    timer = clock.call_at(clock.now() + limit, expire)
    try:
        finished = await waiter
    except asyncio.CancelledError:
        if not asyncio.isfuture(waitable):
            fut.cancel()
        raise
    finally:
        timer.cancel()
        fut.remove_done_callback(done)
    if not finished and not asyncio.isfuture(waitable):
        fut.cancel()
    return finished
