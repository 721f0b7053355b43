"""The one time base: ManualClock (reach.testing) and ``within`` on any clock."""

from __future__ import annotations

import asyncio

from reach.gateway.clock import LoopClock, within
from reach.testing import ManualClock


async def test_manual_clock_fires_timers_in_order_at_their_own_time() -> None:
    clock = ManualClock(wall=100.0)
    seen: list[tuple[str, float]] = []
    clock.call_at(0.3, lambda: seen.append(("c", clock.now())))
    clock.call_at(0.1, lambda: seen.append(("a", clock.now())))
    cancelled = clock.call_at(0.2, lambda: seen.append(("never", clock.now())))
    cancelled.cancel()
    await clock.advance(0.25)
    assert seen == [("a", 0.1)] and clock.now() == 0.25 and clock.wall() == 100.25
    await clock.advance(1.0)
    assert seen == [("a", 0.1), ("c", 0.3)] and clock.pending() == 0


async def test_a_sleeper_woken_inside_a_step_can_sleep_again_within_it() -> None:
    clock = ManualClock()
    woke: list[float] = []

    async def sleeper() -> None:
        for _ in range(3):
            await clock.sleep(0.1)
            woke.append(round(clock.now(), 6))

    task = asyncio.ensure_future(sleeper())
    await clock.advance(0.35)
    assert woke == [0.1, 0.2, 0.3] and task.done()


async def test_within_on_a_future_a_coroutine_and_no_time() -> None:
    clock = ManualClock()
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(clock, fut, 1.0))
    await clock.advance(0.5)
    fut.set_result(None)
    await clock.settle()
    assert waiting.result() is True

    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(within(clock, never, 1.0))
    await clock.advance(1.0)
    assert waiting.result() is False and not never.cancelled()  # a future is left to its owner

    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    waiting = asyncio.ensure_future(within(clock, slow(), 0.2))
    await clock.advance(0.2)
    assert waiting.result() is False and started.is_set()
    assert await within(clock, never, 0.0) is False


async def test_loop_clock_follows_the_event_loop() -> None:
    clock = LoopClock(wall=lambda: 42.0)
    loop = asyncio.get_running_loop()
    assert clock.wall() == 42.0 and abs(clock.now() - loop.time()) < 0.05
    fired = asyncio.Event()
    clock.call_at(clock.now() + 0.001, fired.set)
    assert await within(clock, fired.wait(), 1.0)


async def test_expires_cancels_an_owned_future_at_the_limit_and_wakes_in_one_turn() -> None:
    from reach.gateway.clock import expires
    clock = ManualClock()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(expires(clock, fut, 0.5))
    await clock.advance(0.5)
    assert waiting.result() is False and fut.cancelled() and clock.pending() == 0

    fut = loop.create_future()
    waiting = asyncio.ensure_future(expires(clock, fut, 0.5))
    await asyncio.sleep(0)
    fut.set_result(None)
    await asyncio.sleep(0)  # the result wakes the waiter directly
    assert waiting.done() and waiting.result() is True and clock.pending() == 0

    fut = loop.create_future()
    waiting = asyncio.ensure_future(expires(clock, fut, 5.0))
    await asyncio.sleep(0)
    waiting.cancel()  # cancelled from outside: that is not an expiry
    await asyncio.sleep(0)
    assert waiting.cancelled()


def test_loop_clock_reads_the_time_its_loop_keeps_timers_by() -> None:
    """``now`` is the time base of ``call_at``: on asyncio's own loop that is the monotonic
    clock, and a loop that keeps another time (uvloop's, a test's) is read through its own
    ``time``, so a deadline set from ``now`` fires when the loop says it is due."""

    class Shifted(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + 1000.0

    for loop in (asyncio.SelectorEventLoop(), Shifted()):
        async def read() -> tuple[float, float, float]:
            clock = LoopClock()
            before = asyncio.get_running_loop().time()
            now = clock.now()
            fired = asyncio.get_running_loop().create_future()
            clock.call_at(clock.now() + 0.001, lambda f=fired: f.set_result(clock.now()))
            return before, now, await fired

        try:
            before, now, fired_at = loop.run_until_complete(read())
        finally:
            loop.close()
        assert before <= now < before + 1.0  # the same base: not 1,000 s apart
        assert fired_at >= now + 0.001
