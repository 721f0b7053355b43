"""The gateway's one heap of deadlines (reach.gateway.deadlines) on a ``ManualClock``: each
fires at its time, in order, never once cancelled; one clock timer serves them all, and a
later deadline arms nothing new."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.gateway.deadlines import COMPACT_AFTER, Deadlines
from reach.testing import ManualClock


async def test_deadlines_fire_at_their_time_in_order_and_never_once_cancelled() -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    seen: list[tuple[str, float]] = []
    for name, when in (("c", 0.3), ("a", 0.1), ("b", 0.2), ("a2", 0.1)):
        deadlines.call_at(when, lambda n=name: seen.append((n, clock.now())))
    deadlines.call_at(0.15, lambda: seen.append(("never", clock.now()))).cancel()
    assert deadlines.pending() == 4
    await clock.advance(0.25)
    assert seen == [("a", 0.1), ("a2", 0.1), ("b", 0.2)]
    await clock.advance(1)
    assert seen[-1] == ("c", 0.3) and deadlines.pending() == 0


async def test_one_clock_timer_serves_them_and_a_later_deadline_arms_nothing() -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    for k in range(100):
        deadlines.call_at(5.0 + k, lambda: None)
    assert clock.pending() == 1
    deadlines.call_at(1.0, lambda: None)  # sooner than every other: the timer moves
    assert clock.pending() == 1


async def test_a_deadline_set_while_others_fire_fires_too() -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    seen: list[float] = []

    def again() -> None:
        seen.append(clock.now())
        if len(seen) < 3:
            deadlines.call_at(clock.now() + 0.1, again)

    deadlines.call_at(0.1, again)
    await clock.advance(1)
    assert [round(t, 6) for t in seen] == [0.1, 0.2, 0.3]


async def test_a_failing_callback_does_not_strand_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    seen: list[str] = []

    def broken() -> None:
        raise RuntimeError("bug")

    deadlines.call_at(0.1, broken)
    deadlines.call_at(0.1, lambda: seen.append("next"))
    await clock.advance(0.2)
    assert seen == ["next"] and "a deadline's callback failed" in caplog.text


async def test_cancelled_deadlines_do_not_pile_up() -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    keep = deadlines.call_at(0.5, lambda: None)
    for k in range(4 * COMPACT_AFTER):  # answered calls: their deadlines end cancelled
        deadlines.call_at(1.0 + k / 1000, lambda: None).cancel()
    await clock.advance(0.6)  # the kept one fires; the cancelled ones go at once
    assert keep.fn is None and deadlines.pending() == 0 and deadlines.dead == 0
    assert clock.pending() == 0


async def test_close_cancels_the_clock_timer_and_every_deadline() -> None:
    clock = ManualClock()
    deadlines = Deadlines(clock)
    seen: list[int] = []
    deadlines.call_at(0.1, lambda: seen.append(1))
    deadlines.close()
    await clock.advance(1)
    assert seen == [] and clock.pending() == 0 and deadlines.pending() == 0


@settings(max_examples=60, deadline=None)
@given(plan=st.lists(st.tuples(st.floats(0, 2), st.booleans()), max_size=60),
       seed=st.integers(0, 2**32 - 1))
def test_any_mix_fires_exactly_the_live_ones_in_order(plan: list[tuple[float, bool]],
                                                      seed: int) -> None:
    async def run() -> None:
        clock = ManualClock()
        deadlines = Deadlines(clock)
        fired: list[tuple[float, int]] = []
        live: list[tuple[float, int]] = []
        handles = []
        for k, (when, cancel) in enumerate(plan):
            handles.append(deadlines.call_at(when, lambda w=when, i=k: fired.append((w, i))))
            if not cancel:
                live.append((when, k))
        rng = random.Random(seed)
        order = list(range(len(plan)))
        rng.shuffle(order)
        for k in order:
            if plan[k][1]:
                handles[k].cancel()
        for _ in range(10):
            await clock.advance(rng.choice([0.01, 0.1, 0.3]))
        await clock.advance(3)
        assert fired == sorted(live)
        assert deadlines.pending() == 0

    asyncio.run(run())
