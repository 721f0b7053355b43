"""Backoff, circuit breaker, latency window and adaptive timeouts (reach/resilience.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.backoff import Backoff
from reach.core.resilience import Breaker, BreakerState, LatencyWindow, completion_timeout

B = BreakerState


class FixedRandom(random.Random):
    """A Random whose ``uniform`` returns one end (or the middle) of the range."""

    def __init__(self, where: str) -> None:
        super().__init__(0)
        self.where = where

    def uniform(self, a: float, b: float) -> float:
        return {"low": a, "mid": (a + b) / 2, "high": b}[self.where]


# ------------------------------------------------------------------ backoff

def test_backoff_defaults():
    b = Backoff()
    assert (b.base, b.factor, b.cap, b.jitter) == (0.5, 2.0, 30.0, 0.2)


def test_backoff_without_jitter_grows_by_factor_until_cap():
    b = Backoff(base=0.5, factor=2.0, cap=30.0, jitter=0.0)
    rng = random.Random(0)
    assert [b.delay(n, rng) for n in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_backoff_negative_retry_counts_as_first():
    b = Backoff(jitter=0.0)
    assert b.delay(-3, random.Random(0)) == b.delay(0, random.Random(0)) == 0.5


@pytest.mark.parametrize(("where", "expected"), [("low", 3.2), ("mid", 4.0), ("high", 4.8)])
def test_backoff_jitter_spans_plus_minus_share(where, expected):
    b = Backoff(base=0.5, factor=2.0, cap=30.0, jitter=0.2)
    assert b.delay(3, FixedRandom(where)) == pytest.approx(expected)


def test_backoff_jitter_never_exceeds_cap():
    b = Backoff(base=1.0, factor=2.0, cap=10.0, jitter=0.5)
    # Jitter above the cap is reflected below it, not clamped onto it.
    assert b.delay(10, FixedRandom("high")) == pytest.approx(5.0)
    assert b.delay(10, FixedRandom("low")) == pytest.approx(5.0)
    assert b.delay(10, FixedRandom("mid")) == pytest.approx(10.0)


def test_backoff_at_the_cap_stays_spread_out():
    b = Backoff(base=1.0, factor=2.0, cap=10.0, jitter=0.2)
    rng = random.Random(3)
    values = [b.delay(20, rng) for _ in range(200)]
    assert all(8.0 <= v <= 10.0 for v in values)
    assert sum(1 for v in values if v == 10.0) <= 1  # clamping would put ~half exactly at 10


def test_backoff_jitter_spreads_values():
    b = Backoff()
    rng = random.Random(42)
    values = {round(b.delay(2, rng), 9) for _ in range(50)}
    assert len(values) > 40  # not synchronized
    assert all(1.6 <= v <= 2.4 for v in values)


@settings(max_examples=150, deadline=None)
@given(
    retry=st.integers(min_value=0, max_value=100),
    seed=st.integers(min_value=0, max_value=2**32),
    base=st.floats(min_value=0.001, max_value=5),
    factor=st.floats(min_value=1.0, max_value=4),
    cap=st.floats(min_value=0.01, max_value=120),
    jitter=st.floats(min_value=0, max_value=1),
)
def test_backoff_delay_properties(retry, seed, base, factor, cap, jitter):
    b = Backoff(base=base, factor=factor, cap=cap, jitter=jitter)
    raw = min(cap, base * factor ** retry)
    d = b.delay(retry, random.Random(seed))
    assert 0.0 <= d <= cap
    eps = 1e-9 * max(1.0, raw)
    assert raw * (1 - jitter) - eps <= d <= raw * (1 + jitter) + eps
    # Same seed, same delay: callers can make it reproducible.
    assert b.delay(retry, random.Random(seed)) == d
    # Without jitter the next retry never waits less, and grows by ``factor`` below the cap.
    still = Backoff(base=base, factor=factor, cap=cap, jitter=0.0)
    now, nxt = still.delay(retry, random.Random(0)), still.delay(retry + 1, random.Random(0))
    assert nxt >= now
    if now * factor <= cap:
        assert nxt == pytest.approx(now * factor)
    else:
        assert nxt == cap


# ------------------------------------------------------------------ breaker

def fail(b: Breaker, n: int, now: float = 0.0) -> BreakerState:
    state = b.state
    for _ in range(n):
        state = b.record(False, now)
    return state


def succeed(b: Breaker, n: int, now: float = 0.0) -> BreakerState:
    state = b.state
    for _ in range(n):
        state = b.record(True, now)
    return state


def test_breaker_defaults():
    b = Breaker()
    assert (b.window, b.min_calls, b.threshold, b.open_for) == (10, 5, 0.5, 5.0)
    assert b.state is B.CLOSED and b.allows(0.0)


def test_breaker_does_not_open_before_min_calls():
    b = Breaker()
    assert fail(b, 4) is B.CLOSED
    assert b.allows(0.0)
    assert b.fault_rate() == 1.0
    assert fail(b, 1, now=3.0) is B.OPEN  # fifth call, 100 % faults
    assert b.opened_at == 3.0


def test_breaker_opens_at_exactly_half():
    b = Breaker()
    succeed(b, 3)
    assert fail(b, 2) is B.CLOSED       # 2/5 = 40 %
    assert fail(b, 1) is B.OPEN         # 3/6 = 50 %


def test_breaker_stays_closed_below_half():
    b = Breaker()
    for _ in range(10):
        b.record(True, 0.0)
        b.record(True, 0.0)
        assert b.record(False, 0.0) is B.CLOSED  # 1/3 faults forever
    assert len(b.outcomes) == 10


def test_breaker_window_forgets_old_outcomes():
    b = Breaker()
    succeed(b, 10)
    assert fail(b, 4) is B.CLOSED  # window: 6 ok, 4 faults = 40 %
    assert fail(b, 1) is B.OPEN    # window: 5 ok, 5 faults = 50 %
    assert len(b.outcomes) == 10


def test_breaker_old_faults_slide_out():
    c = Breaker()
    for ok in [False, True, True, False, True, True, True, True, True, True, True, True]:
        c.record(ok, 0.0)
    assert c.state is B.CLOSED
    assert c.fault_rate() == pytest.approx(0.1)


def test_open_breaker_refuses_until_open_for_has_passed():
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    assert not b.allows(100.0)
    assert not b.allows(104.999)
    assert b.allows(105.0)
    assert b.state is B.OPEN  # allows() only looks, it does not change state


def test_a_dispatch_while_open_is_an_early_probe_once_per_open_period():
    # Routing sends one only as the last resort (every agent of the capability open).
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    assert b.early_probe(101.0)
    b.on_dispatch(101.0)
    assert b.state is B.HALF_OPEN and b.probing and not b.allows(101.0)
    b.record(False, 101.5)  # the probe failed: the agent rests the whole open period
    assert b.state is B.OPEN and not b.early_probe(102.0) and not b.allows(106.0)
    assert b.allows(106.5)
    b.on_dispatch(106.5)
    b.record(True, 106.6)
    assert b.state is B.CLOSED and not b.rested


def test_half_open_admits_exactly_one_probe():
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    assert b.allows(106.0)
    b.on_dispatch(106.0)
    assert b.state is B.HALF_OPEN and b.probing
    assert not b.allows(106.0)
    assert not b.allows(1000.0)  # no matter how long the probe takes


def test_probe_success_closes_and_forgets():
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    b.on_dispatch(106.0)
    assert b.record(True, 107.0) is B.CLOSED
    assert not b.probing and b.allows(107.0)
    assert len(b.outcomes) == 0
    # A fresh window: four new faults are not enough to re-open.
    assert fail(b, 4, now=108.0) is B.CLOSED


def test_probe_failure_reopens_for_another_wait():
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    b.on_dispatch(106.0)
    assert b.record(False, 107.0) is B.OPEN
    assert b.opened_at == 107.0 and not b.probing
    assert not b.allows(111.0)
    assert b.allows(112.0)
    b.on_dispatch(112.0)
    assert b.state is B.HALF_OPEN and b.probing


def test_outcomes_while_open_do_not_close_it():
    b = Breaker(open_for=5.0)
    fail(b, 5, now=100.0)
    assert succeed(b, 20, now=101.0) is B.OPEN  # late answers from before the opening
    assert not b.allows(101.0)


@settings(max_examples=150, deadline=None)
@given(outcomes=st.lists(st.booleans(), max_size=40))
def test_breaker_opens_exactly_when_the_window_rule_says(outcomes):
    b = Breaker()
    window: list[bool] = []
    for ok in outcomes:
        if b.state is not B.CLOSED:
            break
        window = (window + [ok])[-10:]
        state = b.record(ok, 0.0)
        faults = window.count(False)
        should_open = len(window) >= 5 and faults / len(window) >= 0.5
        assert state is (B.OPEN if should_open else B.CLOSED), window
        assert b.fault_rate() == pytest.approx(faults / len(window))


# ------------------------------------------------------------------ latency window and timeouts

def test_p95_empty_is_none():
    assert LatencyWindow().p95() is None


def test_p95_of_fifty_samples():
    w = LatencyWindow(size=50)
    for v in range(50, 0, -1):  # order does not matter
        w.add(float(v))
    assert w.p95() == 48.0


def test_p95_of_one_sample_is_that_sample():
    w = LatencyWindow()
    w.add(0.3)
    assert w.p95() == 0.3


def test_p95_window_keeps_only_the_last_size_samples():
    w = LatencyWindow(size=20)
    for _ in range(20):
        w.add(100.0)
    for _ in range(20):
        w.add(1.0)
    assert len(w.samples) == 20
    assert w.p95() == 1.0


def test_p95_cache_is_invalidated_by_add():
    w = LatencyWindow(size=50)
    for _ in range(10):
        w.add(1.0)
    assert w.p95() == 1.0
    for _ in range(10):
        w.add(9.0)
    assert w.p95() == 9.0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e4), min_size=1, max_size=120))
def test_p95_is_a_sample_covering_at_least_95_percent(values):
    w = LatencyWindow(size=50)
    for v in values:
        w.add(v)
    kept = values[-50:]
    p = w.p95()
    assert p in kept
    assert sum(1 for v in kept if v <= p) >= 0.95 * len(kept)
    assert sum(1 for v in kept if v < p) < len(kept)


def test_completion_timeout_uses_declared_latency_without_samples():
    assert completion_timeout(2000.0, LatencyWindow(), None) == pytest.approx(2.4)


def test_completion_timeout_follows_p95_when_slower_than_declared():
    w = LatencyWindow()
    for _ in range(20):
        w.add(3.0)  # inference went from 1 s to 3 s at peak
    assert completion_timeout(1000.0, w, None) == pytest.approx(4.5)


def test_completion_timeout_keeps_declared_when_p95_is_faster():
    w = LatencyWindow()
    for _ in range(20):
        w.add(0.1)
    assert completion_timeout(1000.0, w, None) == pytest.approx(1.2)


@pytest.mark.parametrize("override", [0.05, 100.0])
def test_completion_timeout_override_wins(override):
    w = LatencyWindow()
    w.add(3.0)
    assert completion_timeout(1000.0, w, override) == override


@settings(max_examples=100, deadline=None)
@given(latency_ms=st.floats(min_value=1, max_value=1e5),
       samples=st.lists(st.floats(min_value=0, max_value=100), max_size=30))
def test_completion_timeout_is_the_max_rule(latency_ms, samples):
    w = LatencyWindow()
    for s in samples:
        w.add(s)
    got = completion_timeout(latency_ms, w, None)
    declared = latency_ms / 1000 * 1.2
    expected = declared if not samples else max(declared, w.p95() * 1.5)
    assert got == pytest.approx(expected)
    assert got >= declared - 1e-12
