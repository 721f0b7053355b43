"""Tests that pin behaviour of reach/core/stats.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed. They are
about the 7-day success rate (``DayRate``): which calls an agent's rate counts on which day,
and the trust the weighted routing score multiplies by (``DayRate.trust``).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reach.core.stats import MIN_CALLS, DayRate, reliability


def faults(rate: DayRate, n: int, now: float) -> DayRate:
    for _ in range(n):
        rate.add(False, now)
    return rate


class CountingRate(DayRate):
    """A DayRate that counts how often its calls are counted up (``counts``)."""

    __slots__ = ("looks",)

    def __init__(self, days: int = 7, length: float = 86_400.0) -> None:
        super().__init__(days, length)
        self.looks = 0

    def counts(self, now: float) -> tuple[int, int]:
        self.looks += 1
        return super().counts(now)


# ---------------------------------------------------------------- the horizon


def test_the_default_horizon_is_seven_days_of_24_hours() -> None:
    """An agent's default success rate covers exactly 7 × 24 h: a fault made 6 days 23 h
    ago still counts against it, one made 7 × 86,400 s ago no longer does (stats:69, DAY)."""
    rate = DayRate()
    rate.add(False, 0.0)  # the first second of day 0
    assert rate.counts(7 * 86_400.0 - 1.0) == (0, 1)  # the last second of day 6
    assert rate.counts(7 * 86_400.0) == (0, 0)  # day 7 has begun: day 0 is out
    assert rate.counts(86_400.0) == (0, 1)


def test_as_many_faults_as_successes_is_a_rate_of_one_half() -> None:
    """An agent that failed as often as it succeeded has a success rate of 0.5, not "no
    judged call" (stats:116, the ``if ok + bad`` test)."""
    rate = DayRate()
    rate.add(True, 10.0)
    rate.add(False, 10.0)
    assert rate.rate(10.0) == 0.5
    assert DayRate().rate(10.0) is None


@pytest.mark.parametrize("length", [10.0, 0.5, 86_400.0])
def test_yesterdays_faults_stop_costing_trust_when_the_next_day_begins(length: float) -> None:
    """With a one-day horizon, an agent that failed 20 times today is trusted fully again
    from the very first instant of tomorrow, and all through tomorrow, whatever the day
    length: the trust worked out today is not reused past today's end (stats:121 ``<``,
    stats:123 floor division, stats:125 ``(day + 1) * length``)."""
    rate = faults(DayRate(days=1, length=length), MIN_CALLS, 0.5 * length)
    assert rate.trust(0.5 * length) == 0.0
    assert rate.trust(length) == 1.0  # the first instant of day 1
    rate = faults(DayRate(days=1, length=length), MIN_CALLS, 0.5 * length)
    assert rate.trust(0.5 * length) == 0.0
    assert rate.trust(1.2 * length) == 1.0  # a little into day 1
    rate = faults(DayRate(days=1, length=length), MIN_CALLS, 0.5 * length)
    assert rate.trust(0.5 * length) == 0.0
    assert rate.trust(1.9 * length) == 1.0  # late in day 1


def test_a_rate_with_no_call_yet_trusts_fully() -> None:
    """An agent nobody has judged yet is fully trusted at any time (stats:88 ``_trust = 1.0``, stats:89 ``_until``)."""
    rate = DayRate()
    for now in (-1e9, -1.5, 0.0, 3.0, 1e9):
        assert rate.trust(now) == 1.0


def test_trust_is_worked_out_once_a_day_and_after_each_add() -> None:
    """The weighted routing score reads ``trust`` for every candidate agent on every pick,
    so it is promised to be a constant-time read: the counts are worked out at most once a
    day and after each ``add`` (stats:121, stats:125: without the cache, or with a cache that
    ends before now, every read counts again)."""
    rate = faults(CountingRate(days=7, length=10.0), MIN_CALLS, 1.0)
    assert [rate.trust(t) for t in (1.0, 2.0, 9.9)] == [0.0, 0.0, 0.0]
    assert rate.looks == 1
    rate.add(True, 9.95)
    assert rate.trust(9.95) == pytest.approx(1 / 21)
    assert rate.trust(9.99) == pytest.approx(1 / 21)
    assert rate.looks == 2
    assert rate.trust(10.0) == pytest.approx(1 / 21)  # a new day: counted again
    assert rate.looks == 3


# ---------------------------------------------------------------- any clock


def test_a_clock_below_zero_numbers_days_by_floor_division() -> None:
    """``ports.Clock.now`` is monotonic with no set origin, so it may read below zero: days
    are still ``floor(now / length)``, so a call is counted on the day it was made and
    forgotten ``days`` days later, as at positive times (stats:93 and stats:105: truncating
    the quotient would file -0.5 in day 0, not day -1)."""
    rate = DayRate(days=7, length=10.0)
    rate.add(False, -5.0)  # day -1
    assert rate.counts(-5.0) == (0, 1)
    rate = DayRate(days=7, length=10.0)
    rate.add(True, -65.0)  # day -7: the oldest day still counted on day -1
    assert rate.counts(-5.0) == (1, 0)
    assert rate.counts(5.0) == (0, 0)  # day 0: day -7 is out


def test_trust_after_an_add_is_fresh_below_zero_too() -> None:
    """Bug fixed: an add marked the trust stale by setting its end to -1.0, a time like any
    other, so on a clock reading below -1 s the score kept using the trust worked out before
    the add (full trust for an agent failing every call)."""
    rate = faults(DayRate(), MIN_CALLS, -1e6)
    assert rate.trust(-1e6) == 0.0
    rate = DayRate()
    assert rate.trust(-1e6) == 1.0
    faults(rate, MIN_CALLS, -1e6)
    assert rate.trust(-1e6) == 0.0


LENGTHS = st.sampled_from([10.0, 0.5, 0.1, 3.0])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), LENGTHS,
       st.lists(st.tuples(st.booleans(), st.floats(-200.0, 200.0), st.booleans()),
                max_size=40))
@example(1, 0.5, [(False, 0.25, False)] * MIN_CALLS + [(True, 0.25, True), (True, 0.6, True)])
@example(7, 0.1, [(True, 0.35, False), (True, 1.0, True)])
def test_counts_and_trust_agree_with_a_per_call_model(
        days: int, length: float, steps: list[tuple[bool, float, bool]]) -> None:
    """Against a model that keeps every call: at any read, the rate counts exactly the calls
    made in the last ``days`` days (``day = now // length``), and ``trust`` is the
    ``reliability`` of those counts, for reads in time order with adds in between (a clock
    that does not go back). Each step is (ok, time, read-instead-of-add); times only grow."""
    rate = DayRate(days, length)
    calls: list[tuple[bool, int]] = []
    clock = -1e9
    for ok, at, read in steps:
        clock = max(clock, at)
        today = int(clock // length)
        if not read:
            rate.add(ok, clock)
            calls.append((ok, today))
            continue
        inside = [good for good, day in calls if today - days < day <= today]
        good = sum(inside)
        assert rate.counts(clock) == (good, len(inside) - good)
        assert rate.trust(clock) == reliability(good, len(inside) - good)
