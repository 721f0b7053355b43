"""reach.core.resilience, pinned where mutation testing found it loose (issue 17).

Breaker: the defaults, the window, the threshold edge, the half-open probe and ``reset``.
RetryBudget: first attempts and retries are forgotten once out of the window (a budget that
never forgets first attempts is no retry-storm protection after a long healthy period).
Pacer: the client's back-pressure wait, read against a fake clock (``now`` values).
completion_timeout: the declared latency against the measured P95.
"""

from __future__ import annotations

import pytest

from reach.core.resilience import (
    Breaker,
    BreakerState,
    LatencyWindow,
    Pacer,
    RetryBudget,
    completion_timeout,
)

OPEN, CLOSED, HALF = BreakerState.OPEN, BreakerState.CLOSED, BreakerState.HALF_OPEN


def opened(at: float = 100.0, **kw: float) -> Breaker:
    b = Breaker(**kw)  # type: ignore[arg-type]
    for _ in range(b.min_calls):
        b.record(False, at)
    assert b.state is OPEN and b.opened_at == at
    return b


# ------------------------------------------------------------------ Breaker


def test_default_breaker_opens_on_the_fifth_failure_not_the_fourth():
    b = Breaker()
    for i in range(4):
        assert b.record(False, float(i)) is CLOSED
    assert b.allows(4.0)
    assert b.record(False, 4.0) is OPEN
    assert b.opened_at == 4.0 and not b.allows(4.0)


def test_default_breaker_stays_closed_below_half_failed_and_opens_at_half():
    b = Breaker()
    for ok in (True,) * 6 + (False,) * 4:  # 4 of 10 failed
        assert b.record(ok, 1.0) is CLOSED
    assert b.fault_rate() == pytest.approx(0.4)
    b = Breaker()
    for ok in (True,) * 5 + (False,) * 4:
        assert b.record(ok, 1.0) is CLOSED
    assert b.record(False, 2.0) is OPEN  # 5 of 10: the threshold itself opens it


def test_breaker_window_keeps_only_the_last_ten_outcomes():
    b = Breaker()
    for _ in range(25):
        b.record(True, 1.0)
    assert len(b.outcomes) == 10
    # Four failures among the last ten: 0.4, closed; with a window of 9 or 11 it would differ.
    for _ in range(4):
        b.record(False, 2.0)
    assert len(b.outcomes) == 10 and b.fault_rate() == pytest.approx(0.4)
    assert b.state is CLOSED


def test_fault_rate_is_failures_over_calls_and_zero_when_empty():
    b = Breaker(min_calls=100)
    assert b.fault_rate() == 0.0
    for ok in (True, False, True, True):
        b.record(ok, 0.0)
    assert b.fault_rate() == 0.25


def test_open_breaker_waits_exactly_open_for_then_admits_the_probe():
    b = opened(at=100.0)
    assert b.open_for == 5.0
    assert not b.allows(104.999)
    assert b.allows(105.0)
    b.on_dispatch(105.0)
    assert b.state is HALF and b.probing
    assert not b.allows(105.0)  # one probe at a time


def test_half_open_without_its_probe_out_allows_a_call():
    b = opened()
    b.on_dispatch(200.0)
    b.probing = False
    assert b.state is HALF and b.allows(200.0)


def test_dispatch_to_a_closed_breaker_changes_nothing():
    b = Breaker()
    b.on_dispatch(1.0)
    assert b.state is CLOSED and not b.probing


def test_successful_probe_closes_with_a_fresh_window():
    b = opened(at=100.0)
    b.on_dispatch(105.0)
    assert b.record(True, 105.5) is CLOSED
    assert not b.probing and not b.rested and len(b.outcomes) == 0
    # The faults from before the probe are gone: four new failures do not re-open it.
    for _ in range(4):
        assert b.record(False, 106.0) is CLOSED


def test_failed_probe_reopens_rested_from_the_probe_time():
    b = opened(at=100.0)
    b.on_dispatch(105.0)
    assert b.record(False, 106.0) is OPEN
    assert b.opened_at == 106.0 and b.rested and not b.probing and len(b.outcomes) == 0
    assert not b.early_probe(106.0)  # no early probe after a failed one
    assert not b.allows(110.9) and b.allows(111.0)


def test_early_probe_only_for_an_open_breaker_not_rested():
    assert not Breaker().early_probe(0.0)
    b = opened()
    assert b.early_probe(100.0)
    b.on_dispatch(100.0)
    assert not b.early_probe(100.0)  # half-open


def test_reset_clears_state_window_probe_and_rest():
    b = opened(at=100.0)
    b.on_dispatch(105.0)
    b.record(False, 106.0)  # a failed probe: open and rested
    b.on_dispatch(111.0)  # another probe out
    assert b.probing and b.rested and b.state is HALF
    b.reset()
    assert b.state is CLOSED and not b.probing and not b.rested and len(b.outcomes) == 0


def test_after_reset_the_old_faults_do_not_reopen_on_the_first_call():
    """The operator's reset (or a new version): its first failed call must not re-open it."""
    b = Breaker()
    for ok in (True,) * 5 + (False,) * 4:
        b.record(ok, 1.0)
    b.record(False, 1.0)
    assert b.state is OPEN
    b.reset()
    assert b.record(False, 2.0) is CLOSED
    assert b.fault_rate() == 1.0 and len(b.outcomes) == 1


def test_after_reset_a_new_open_period_gets_its_early_probe_again():
    b = opened(at=100.0)
    b.on_dispatch(105.0)
    b.record(False, 106.0)
    assert not b.early_probe(106.0)
    b.reset()
    for _ in range(5):
        b.record(False, 200.0)
    assert b.state is OPEN and b.early_probe(200.0)


# ------------------------------------------------------------------ timeouts


def test_latency_window_keeps_fifty_and_reads_its_p95():
    w = LatencyWindow()
    assert w.size == 50 and w.p95() is None
    for i in range(100):
        w.add(float(i))
    assert len(w) == 50
    # samples 50..99: the 0.95 quantile is ordered[int(0.95 * 50)] = ordered[47]
    assert w.p95() == 97.0


def test_completion_timeout_declared_measured_and_override():
    w = LatencyWindow()
    assert completion_timeout(1000.0, w, None) == pytest.approx(1.2)
    assert completion_timeout(1000.0, w, 0.0) == 0.0  # an override wins, even zero
    assert completion_timeout(1000.0, w, 7.5) == 7.5
    for _ in range(10):
        w.add(2.0)
    assert completion_timeout(1000.0, w, None) == pytest.approx(3.0)  # 2.0 × 1.5
    assert completion_timeout(5000.0, w, None) == pytest.approx(6.0)  # declared is longer


# ------------------------------------------------------------------ RetryBudget


def test_fresh_budget_allows_exactly_its_minimum():
    budget = RetryBudget()
    assert budget.allowance(0.0) == 10
    assert all(budget.spend(0.5) for _ in range(10))
    assert not budget.spend(0.5)
    assert budget.allowance(0.5) == 0  # a refused spend takes nothing


def test_first_attempts_raise_the_allowance_by_the_ratio():
    budget = RetryBudget()
    for _ in range(50):
        budget.first(0.2)
    assert budget.allowance(0.3) == pytest.approx(20.0)  # 10 + 0.2 × 50


def test_first_attempts_are_forgotten_once_out_of_the_window():
    """Issue 17 survivor 1: without ``self.firsts -= f`` a long healthy period would leave an
    ever larger allowance, and a retry storm would be let through."""
    budget = RetryBudget()
    for _ in range(50):
        budget.first(1.5)  # second 1
    assert budget.allowance(10.9) == pytest.approx(20.0)  # second 10: 1 > 10 - 10, kept
    assert budget.allowance(11.0) == pytest.approx(10.0)  # second 11: forgotten
    assert budget.firsts == 0


def test_firsts_in_one_second_share_a_bucket_and_leave_together():
    budget = RetryBudget()
    budget.first(3.1)
    budget.first(3.9)
    budget.first(4.2)
    assert len(budget.buckets) == 2
    assert budget.allowance(13.5) == pytest.approx(10.2)  # second 3 gone, second 4 kept
    assert budget.allowance(14.0) == pytest.approx(10.0)


def test_retries_are_forgotten_once_out_of_the_window():
    budget = RetryBudget()
    for _ in range(10):
        assert budget.spend(2.0)
    assert not budget.spend(11.9)
    assert budget.allowance(12.0) == 10
    assert budget.retries == 0 and budget.spend(12.0)


def test_spend_needs_a_whole_retry_left():
    budget = RetryBudget(minimum=0)
    for _ in range(4):
        budget.first(0.0)
    assert budget.allowance(0.0) == pytest.approx(0.8)
    assert not budget.spend(0.0)  # 0.8 of a retry is not one
    budget.first(0.0)
    assert budget.allowance(0.0) == pytest.approx(1.0)
    assert budget.spend(0.0)  # exactly one is
    assert not budget.spend(0.0)


def test_budget_window_is_ten_seconds_by_default():
    budget = RetryBudget()
    budget.spend(0.0)
    assert budget.allowance(9.99) == 9
    assert budget.allowance(10.0) == 10


# ------------------------------------------------------------------ Pacer


def test_pacer_first_rejection_waits_by_level_from_now():
    pacer = Pacer()
    assert pacer.max_delay == 1.0 and pacer.wait(50.0) == 0.0
    assert Pacer().wait(0.0) == 0.0  # a fresh pacer holds nothing, whatever the clock reads
    pacer.rejected(0.0, now=100.0)
    assert pacer.delay == pytest.approx(0.01)  # 0.02 × (0.5 + 0)
    assert pacer.wait(100.0) == pytest.approx(0.01)
    assert pacer.wait(100.004) == pytest.approx(0.006)
    assert pacer.wait(100.5) == 0.0  # past: no wait, never negative
    fresh = Pacer()
    fresh.rejected(1.0, now=0.0)
    assert fresh.delay == pytest.approx(0.03)  # 0.02 × 1.5


def test_pacer_clamps_the_level():
    high, low = Pacer(), Pacer()
    high.rejected(7.0, now=0.0)
    low.rejected(-3.0, now=0.0)
    assert high.delay == pytest.approx(0.03) and low.delay == pytest.approx(0.01)


def test_pacer_wait_doubles_under_pressure_up_to_its_cap():
    pacer = Pacer()
    pacer.rejected(1.0, now=0.0)
    pacer.rejected(1.0, now=1.0)
    assert pacer.delay == pytest.approx(0.09)  # 0.03 × 2 × 1.5
    assert pacer.wait(1.0) == pytest.approx(0.09)
    for _ in range(10):
        pacer.rejected(1.0, now=2.0)
    assert pacer.delay == 1.0 and pacer.wait(2.25) == pytest.approx(0.75)


def test_pacer_halves_with_each_acceptance_and_stops_below_a_millisecond():
    pacer = Pacer(delay=0.002)
    pacer.accepted()
    assert pacer.delay == pytest.approx(0.001)  # a millisecond is kept
    pacer.accepted()
    assert pacer.delay == 0.0  # half of it is not
    pacer = Pacer()
    pacer.rejected(1.0, now=0.0)
    for _ in range(4):
        pacer.accepted()
    assert pacer.delay == pytest.approx(0.03 / 16)


def test_pacer_accept_does_not_move_a_wait_already_set():
    pacer = Pacer()
    pacer.rejected(1.0, now=10.0)
    pacer.accepted()
    assert pacer.wait(10.0) == pytest.approx(0.03)
    pacer.rejected(1.0, now=20.0)  # from the halved delay: 0.015 × 2 × 1.5
    assert pacer.wait(20.0) == pytest.approx(0.045)


def test_a_success_that_fills_the_window_to_min_calls_can_trip_the_breaker():
    """Four faults are too few to judge; the fifth call, a success, makes 4 of 5 failed: the
    breaker opens on that success. Past min_calls, successes alone never open it."""
    b = Breaker(window=10, min_calls=5, threshold=0.5)
    for t in range(4):
        b.record(False, float(t))
    assert b.state is BreakerState.CLOSED
    assert b.record(True, 4.0) is BreakerState.OPEN
    assert (b.tripped_calls, b.tripped_rate, b.opened_at) == (5, 0.8, 4.0)
    calm = Breaker(window=10, min_calls=5, threshold=0.5)
    for t, ok in enumerate([True, True, True, False, False, True, True, True, True]):
        assert calm.record(ok, float(t)) is BreakerState.CLOSED
