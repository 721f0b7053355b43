"""The gateway's small parts at their edges: bounded waits racing their own limit, slot
waiters that gave up, event readers and listeners that misbehave, a delivery's timer firing
early or late, and a crew stopped with nothing to stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from reach.gateway.clock import LoopClock, expires, within
from reach.gateway.crew import Crew
from reach.gateway.delivery import Delivery
from reach.gateway.events import TASK, Event, EventBus
from reach.gateway.slots import SlotQueue
from reach.testing import ManualClock

# ---------------------------------------------------------------- clock: bounded waits


async def test_loop_clock_sleeps_on_the_loop_and_rebinds_to_a_new_loop() -> None:
    clock = LoopClock()
    before = clock.now()
    await clock.sleep(0.001)
    assert clock.now() > before
    old = asyncio.new_event_loop()
    old.close()
    clock._loop = old  # bound to a loop that is gone (a clock kept across loops)
    fired = asyncio.Event()
    clock.call_at(clock.now(), fired.set)
    assert clock._loop is asyncio.get_running_loop()
    assert await within(clock, fired.wait(), 1.0)


async def test_expires_on_a_finished_future_answers_at_once() -> None:
    clock = ManualClock()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    done.set_result(None)
    cancelled: asyncio.Future[None] = loop.create_future()
    cancelled.cancel()
    assert await expires(clock, done, 1.0) is True
    assert await expires(clock, cancelled, 1.0) is False
    assert clock.pending() == 0


async def test_a_future_resolved_in_the_turn_its_limit_falls_counts_as_done() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    # The result is ready before the limit's timer runs in the same turn of the loop: the
    # timer finds it done and leaves it alone.
    loop.call_soon(fut.set_result, None)
    assert await expires(clock, fut, 0.0) is True
    assert fut.result() is None


async def test_within_a_finished_or_zero_limit_and_a_coroutine_is_cancelled() -> None:
    clock = ManualClock()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    done.set_result(1)
    assert await within(clock, done, 5.0) is True

    started: list[bool] = []

    async def work() -> None:
        started.append(True)
        await asyncio.Event().wait()

    coro = work()
    assert await within(clock, coro, 0.0) is False  # no time: never even started
    assert started == [] and clock.pending() == 0


async def test_within_cancelled_from_outside_cancels_a_coroutine_not_a_future() -> None:
    clock = ManualClock()
    loop = asyncio.get_running_loop()
    ended: list[str] = []

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    waiting = asyncio.ensure_future(within(clock, work(), 5.0))
    await clock.settle()
    waiting.cancel()
    await clock.settle()
    assert waiting.cancelled() and ended == ["cancelled"] and clock.pending() == 0

    owned: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(within(clock, owned, 5.0))
    await clock.settle()
    waiting.cancel()
    await clock.settle()
    assert waiting.cancelled() and not owned.done()  # the owner's future is left alone


class RacingClock(ManualClock):
    """A ManualClock whose timers do ``race(fn)`` instead of ``fn()``: a result and a
    limit meeting in one turn of the loop."""

    def __init__(self, race: Callable[[Callable[[], None]], None]) -> None:
        super().__init__()
        self.race = race

    def call_at(self, when: float, fn: Callable[[], None]) -> Any:
        return super().call_at(when, lambda: self.race(fn))


async def test_within_a_result_right_after_the_limit_keeps_the_limits_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    clock = RacingClock(lambda expire: (expire(), fut.set_result(None)))
    waiting = asyncio.ensure_future(within(clock, fut, 1.0))
    with caplog.at_level(logging.ERROR):
        await clock.advance(1.0)
    assert waiting.result() is False and fut.done()  # the late result's callback: a no-op
    assert not caplog.records


async def test_within_a_limit_right_after_the_result_keeps_the_results_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    clock = RacingClock(lambda expire: (fut.set_result(None), loop.call_soon(expire)))
    waiting = asyncio.ensure_future(within(clock, fut, 1.0))
    with caplog.at_level(logging.ERROR):
        await clock.advance(1.0)
    assert waiting.result() is True  # the expiry that came after it: a no-op
    assert not caplog.records


# ---------------------------------------------------------------- slots


async def test_waiters_that_gave_up_are_dropped_at_the_next_wake() -> None:
    clock = ManualClock()
    slots = SlotQueue(aging=50.0, clock=clock)
    waiting = asyncio.ensure_future(slots.wait("x.work", 5, 0.0, 0.2, "c"))
    await clock.settle()
    assert slots.waiting("x.work") == 1
    await clock.advance(0.2)  # the wait ended (the driver rejects the task)
    assert waiting.done() and slots.waiting("x.work") == 0
    assert slots.capabilities() == ["x.work"]  # listed until a wake looks
    slots.wake(["x.work", "y.none"], clock.now())
    assert slots.capabilities() == [] and not slots.yields_to("x.work", "c", lambda c: 0)


async def test_a_wake_goes_to_the_least_busy_caller_then_the_oldest_highest_priority() -> None:
    clock = ManualClock()
    slots = SlotQueue(aging=1.0, clock=clock)
    woke: list[str] = []

    async def wait(name: str, priority: int, since: float, caller: str) -> None:
        await slots.wait("x.work", priority, since, 10.0, caller)
        woke.append(name)

    usage = {"busy": 5, "light": 1}
    for args in (("busy-9", 9, 0.0, "busy"), ("light-1", 1, 0.5, "light"),
                 ("light-3", 3, 0.5, "light")):
        asyncio.ensure_future(wait(*args))
    await clock.settle()
    assert slots.yields_to("x.work", "busy", usage.__getitem__)
    assert not slots.yields_to("x.work", "light", usage.__getitem__)
    for _ in range(3):
        slots.wake(["x.work"], clock.now(), usage.__getitem__)
        await clock.settle()
    assert woke == ["light-3", "light-1", "busy-9"]
    slots.cancel_all()


async def test_cancel_all_ends_every_wait_still_waiting() -> None:
    clock = ManualClock()
    slots = SlotQueue(aging=50.0, clock=clock)
    gave_up = asyncio.ensure_future(slots.wait("x.work", 5, 0.0, 0.1, "b"))
    waiting = asyncio.ensure_future(slots.wait("x.work", 5, 0.0, 10.0, "c"))
    await clock.advance(0.1)
    assert gave_up.done() and not waiting.done()
    slots.cancel_all()
    await clock.settle()
    assert waiting.cancelled() and slots.waiting("x.work") == 0
    assert slots.capabilities() == [] and clock.pending() == 0
    assert not slots.yields_to("x.work", "d", lambda c: 0)  # its caller no longer counts


# ---------------------------------------------------------------- events


async def test_a_subscription_buffers_drops_the_oldest_and_closes_once() -> None:
    clock = ManualClock(wall=100.0)
    bus = EventBus(clock)
    sub = bus.subscribe(maxsize=2)
    assert bus.active
    for n in range(3):
        bus.publish(TASK, {"n": n})
    assert await sub.wait(1.0) is True  # already buffered: no wait
    events = sub.drain()
    assert [e.data["n"] for e in events] == [1, 2] and sub.dropped == 1
    assert events[0].to_dict() == {"seq": 2, "at": 100.0, "kind": TASK, "n": 1}
    waiting = asyncio.ensure_future(sub.wait(1.0))
    await clock.advance(1.0)
    assert waiting.result() is False
    sub.close()
    sub.close()  # twice: still closed, nothing else removed
    assert sub.closed and not bus.active


async def test_a_listener_that_raises_is_removed_and_the_others_still_hear(
        caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus(ManualClock())
    heard: list[int] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    bus.listen(broken)
    stop = bus.listen(lambda e: heard.append(e.seq))
    with caplog.at_level(logging.ERROR, logger="reach.events"):
        bus.publish(TASK, {})
        bus.publish(TASK, {})
    assert heard == [1, 2]
    assert sum("failed and was removed" in r.getMessage() for r in caplog.records) == 1
    stop()
    stop()  # stopping twice is harmless
    assert not bus.active
    bus.publish(TASK, {})  # nobody listens: nothing is built or counted
    assert bus._seq == 2


# ---------------------------------------------------------------- delivery


class HandClock:
    """A clock whose timers fire only when the test calls them, at whatever time it says."""

    def __init__(self) -> None:
        self.t = 0.0
        self.timers: list[tuple[float, Callable[[], None], Any]] = []

    def wall(self) -> float:
        return self.t

    def now(self) -> float:
        return self.t

    def call_at(self, when: float, fn: Callable[[], None]) -> Any:
        handle = asyncio.get_running_loop().call_later(3600, lambda: None)
        self.timers.append((when, fn, handle))
        return handle

    async def sleep(self, delay: float) -> None:
        raise NotImplementedError

    def fire(self, at: float) -> None:
        """Run the latest timer with the clock at ``at``."""
        self.t = at
        _, fn, handle = self.timers[-1]
        assert not handle.cancelled()
        fn()


async def test_a_delivery_timer_that_fires_early_is_armed_again() -> None:
    clock = HandClock()
    d = Delivery(clock, ack_timeout=1.0, completion=5.0, on_chunk=None)
    assert clock.timers[-1][0] == 1.0
    clock.fire(0.9999)  # early, as asyncio may run a timer within its clock's resolution
    assert not d.fut.done() and clock.timers[-1][0] == 1.0
    clock.fire(1.0)
    assert d.fut.result() == ("undelivered", None)
    for *_, handle in clock.timers:
        handle.cancel()


async def test_a_delivery_fired_late_by_a_stalled_loop_waits_once_more() -> None:
    clock = HandClock()
    d = Delivery(clock, ack_timeout=1.0, completion=5.0, on_chunk=None)
    d.ack()
    d.chunk(0, "ignored")  # nobody asked for chunks
    clock.fire(1.0)  # the ack deadline passed, acknowledged: on to the completion deadline
    assert clock.timers[-1][0] == 5.0
    clock.fire(5.5)  # the loop stalled half a second past it: the answer may be unread
    assert not d.fut.done() and clock.timers[-1][0] == pytest.approx(6.0)
    clock.fire(6.0)
    assert d.fut.result() == ("timeout", None)
    d.resolve("ok", 1)  # too late: the first end stands
    d.ack()  # and an ack after the end changes nothing
    assert d.fut.result() == ("timeout", None) and d.acked
    for *_, handle in clock.timers:
        handle.cancel()


async def test_a_late_ack_starts_the_completion_clock_from_the_ack() -> None:
    clock = HandClock()
    acks: list[bool] = []
    d = Delivery(clock, ack_timeout=1.0, completion=2.0, on_chunk=None,
                 on_ack=lambda: acks.append(True))
    assert clock.timers[-1][0] == 1.0
    clock.t = 0.9
    d.ack()  # 0.9 s after it left: the agent gets its whole completion time from now
    assert acks == [True] and clock.timers[-1][0] == pytest.approx(2.9)
    assert clock.timers[0][2].cancelled()  # the first timer is gone
    clock.fire(2.9)
    assert d.fut.result() == ("timeout", None)
    for *_, handle in clock.timers:
        handle.cancel()


async def test_a_delivery_timer_that_runs_after_the_answer_changes_nothing() -> None:
    clock = HandClock()
    answers: list[Any] = []
    d = Delivery(clock, ack_timeout=1.0, completion=2.0, on_chunk=None,
                 on_ok=answers.append)
    d.ack()
    d.resolve("ok", {"n": 1})
    assert answers == [{"n": 1}] and clock.timers[-1][2].cancelled()
    _, expire, _ = clock.timers[-1]
    clock.t = 2.0
    expire()  # a timer already taken off the loop's queue when it was cancelled
    assert d.fut.result() == ("ok", {"n": 1})


# ---------------------------------------------------------------- crew


async def test_a_crew_stops_with_nothing_running_and_drains_within_its_grace() -> None:
    crew = Crew()
    await crew.stop(1.0)  # nothing to stop
    finished: list[str] = []

    async def quick() -> None:
        await asyncio.sleep(0)
        finished.append("quick")

    crew.spawn(quick(), name="quick")
    assert len(crew) == 1
    await crew.stop(1.0)  # ends within the grace: nothing is cancelled
    assert finished == ["quick"] and len(crew) == 0
