"""The completion timeout of a capability that declares no ``latency_ms`` (issue 13, item 6).

Field: "An agent that declares no latency_ms gets a 1.2 s completion timeout: a 1.5 s handler's
work ran and was dead-lettered anyway." Until such a capability has history its timeout is the
coordinator's ``default_timeout``; with history, its own P95 × 1.5 above a floor; a declared
latency keeps the rule it had; a caller's time left wins over every row.
"""

from __future__ import annotations

import pytest

from reach.config import Settings
from reach.core.resilience import DEFAULT_RULE, LatencyWindow, TimeoutRule, completion_timeout

RULE = TimeoutRule(default=30.0, floor=1.0, samples=3)


def window(*samples: float) -> LatencyWindow:
    w = LatencyWindow()
    for s in samples:
        w.add(s)
    return w


def test_the_default_rule_is_30_s_floor_1_s_after_20_successes() -> None:
    assert (DEFAULT_RULE.default, DEFAULT_RULE.floor, DEFAULT_RULE.samples) == (30.0, 1.0, 20)
    assert completion_timeout(None, window(), None) == 30.0
    assert completion_timeout(None, window(*[0.5] * 19), None) == 30.0
    assert completion_timeout(None, window(*[0.5] * 20), None) == pytest.approx(1.0)


def test_undeclared_without_history_gets_the_default_not_1_2_s() -> None:
    assert completion_timeout(None, window(), None, RULE) == 30.0
    assert completion_timeout(None, window(2.0, 2.0), None, RULE) == 30.0  # 2 < 3 samples


def test_undeclared_with_history_follows_its_p95() -> None:
    # P95 of [2, 2, 4] is 4: 4 × 1.5 = 6 s, well above the floor, below the default.
    assert completion_timeout(None, window(2.0, 2.0, 4.0), None, RULE) == pytest.approx(6.0)


def test_undeclared_with_fast_history_never_goes_below_the_floor() -> None:
    assert completion_timeout(None, window(0.01, 0.01, 0.02), None, RULE) == 1.0
    # exactly at the floor: P95 × 1.5 == floor
    got = completion_timeout(None, window(0.5, 0.5, 0.5), None, TimeoutRule(30.0, 0.75, 3))
    assert got == pytest.approx(0.75)
    got = completion_timeout(None, window(0.5, 0.5, 0.5), None, TimeoutRule(30.0, 0.7, 3))
    assert got == pytest.approx(0.75)


def test_undeclared_history_may_exceed_the_default() -> None:
    """A capability that really takes 40 s is not held to the 30 s default once it has a
    record: its own P95 rules."""
    assert completion_timeout(None, window(40.0, 40.0, 40.0), None, RULE) == pytest.approx(60.0)


def test_a_rule_that_needs_no_samples_uses_the_default_until_there_is_one() -> None:
    rule = TimeoutRule(default=7.0, floor=1.0, samples=0)
    assert completion_timeout(None, window(), None, rule) == 7.0
    assert completion_timeout(None, window(3.0), None, rule) == pytest.approx(4.5)


def test_a_declared_latency_keeps_its_rule_whatever_the_default() -> None:
    assert completion_timeout(2000.0, window(), None, RULE) == pytest.approx(2.4)
    assert completion_timeout(1000.0, window(0.1, 0.1, 0.1), None, RULE) == pytest.approx(1.2)
    assert completion_timeout(100.0, window(1.0), None, RULE) == pytest.approx(1.5)


@pytest.mark.parametrize("latency_ms", [None, 1000.0])
def test_the_callers_time_left_wins(latency_ms: float | None) -> None:
    assert completion_timeout(latency_ms, window(9.0, 9.0, 9.0), 0.25, RULE) == 0.25
    assert completion_timeout(latency_ms, window(), 50.0, RULE) == 50.0


def test_settings_refuse_a_rule_that_cannot_work() -> None:
    for bad in ({"default_timeout": 0}, {"timeout_floor": -1.0}, {"timeout_samples": 0}):
        with pytest.raises(ValueError, match="default_timeout"):
            Settings(**bad)  # type: ignore[arg-type]
    s = Settings()
    assert (s.default_timeout, s.timeout_floor, s.timeout_samples) == (30.0, 1.0, 20)
