"""The probe rule (reach.core.probes): due times, slow verdicts, the hold and its release."""

from __future__ import annotations

import pytest

from reach.core.liveness import Liveness, LivenessPolicy, bounded_interval, judge
from reach.core.probes import ProbeBook, ProbePolicy, Verdict, bounded, slow_call

POLICY = ProbePolicy(interval=30.0, slow=5.0)


def book(**kw: float) -> ProbeBook:
    return ProbeBook(ProbePolicy(**kw) if kw else POLICY)  # type: ignore[arg-type]


def test_policy_refuses_what_cannot_work() -> None:
    for bad in ({"interval": 0}, {"slow": 0}, {"interval": -1}, {"slow": -1},
                {"suspect_after": 0}, {"max_outstanding": 0}):
        with pytest.raises(ValueError):
            ProbePolicy(**bad)  # type: ignore[arg-type]
    assert ProbePolicy(suspect_after=1, max_outstanding=1).suspect_after == 1
    assert (POLICY.interval, POLICY.slow, POLICY.suspect_after, POLICY.max_outstanding) == (
        30.0, 5.0, 2, 2)


def test_bounds_and_slow_calls() -> None:
    assert bounded(None, 30.0, 1 / 6, 4.0) == 30.0
    assert bounded(1.0, 30.0, 1 / 6, 4.0) == 5.0
    assert bounded(500.0, 30.0, 1 / 6, 4.0) == 120.0
    assert bounded(45.0, 30.0, 1 / 6, 4.0) == 45.0
    assert bounded_interval(None, 10.0) == 10.0
    assert bounded_interval(0.5, 10.0) == 2.5 and bounded_interval(1000, 10.0) == 60.0
    assert bounded_interval(15.0, 10.0) == 15.0
    assert slow_call(0.1, 100.0, True, 3.0)  # a timeout is slow whatever it took
    assert not slow_call(0.3, 100.0, False, 3.0)  # exactly 3×: not over it
    assert slow_call(0.3001, 100.0, False, 3.0)
    assert not slow_call(0.05, 100.0, False, 3.0)
    assert not slow_call(99.0, None, False, 3.0)  # undeclared latency: only a timeout tells
    assert slow_call(99.0, None, True, 3.0)


def test_first_probe_after_one_interval_then_every_interval_when_fast() -> None:
    b = book()
    b.track("a", now=100.0)
    assert b.next_at() == 130.0
    assert b.due(129.9) == ([], [])
    send, verdicts = b.due(130.0)
    assert send == ["a"] and verdicts == []
    b.sent("a", 1, 130.0)
    assert b.next_at() == 135.0  # the slow limit of probe 1 comes before the next probe
    verdict = b.answered("a", 1, 130.2)
    assert verdict == Verdict(slow=False, ms=200.0)
    assert b.next_at() == 160.2
    state = b.states["a"]
    assert (state.sent, state.streak, state.last_ok, state.last_ms) == (1, 0, True, 200.0)


def test_two_unanswered_probes_in_a_row_suspect_and_a_fast_one_restores() -> None:
    b = book()
    b.track("z", now=0.0)
    assert b.due(30.0)[0] == ["z"]
    b.sent("z", 1, 30.0)
    assert b.due(34.99) == ([], [])
    send, verdicts = b.due(35.0)  # unanswered within probe_slow: slow #1, and probe again
    assert verdicts == [("z", Verdict(slow=True, ms=None))]
    assert send == ["z"]
    b.sent("z", 2, 35.0)
    send, verdicts = b.due(40.0)
    assert verdicts == [("z", Verdict(slow=True, ms=None, change="suspect"))]
    assert send == []  # two unanswered already: no third while it cannot answer
    assert b.states["z"].held and b.next_at() is None
    # The wedge clears: the first answer is late (already judged) and frees a place ...
    late = b.answered("z", 1, 41.0)
    assert late is not None and late.late and late.slow and late.change is None
    assert b.states["z"].held  # ... a late answer proves nothing
    send, _ = b.due(41.0)
    assert send == ["z"]
    b.sent("z", 3, 41.0)
    verdict = b.answered("z", 3, 41.01)
    assert verdict is not None and verdict.change == "restore" and not verdict.slow
    assert not b.states["z"].held and b.states["z"].streak == 0


def test_a_slow_answer_counts_and_a_failed_check_counts_however_fast() -> None:
    b = book()
    b.track("s", now=0.0)
    b.due(30.0)
    b.sent("s", 1, 30.0)
    slow = b.answered("s", 1, 35.5)  # answered, but after probe_slow (not yet judged)
    assert slow == Verdict(slow=True, ms=5500.0)
    assert b.next_at() == 35.5  # a slow probe: the next at once
    b.due(35.5)
    b.sent("s", 2, 35.5)
    failed = b.answered("s", 2, 35.6, ok=False)
    assert failed is not None and failed.slow and failed.change == "suspect"
    assert b.states["s"].last_ok is False and b.states["s"].slow_probes == 2


def test_one_fast_probe_between_slow_ones_resets_the_streak() -> None:
    b = book(interval=1.0, slow=0.5)
    b.track("x", now=0.0)
    for probe_id, (at, took) in enumerate([(1.0, 0.6), (1.6, 0.1), (2.7, 0.6)], 1):
        assert b.due(at)[0] == ["x"]
        b.sent("x", probe_id, at)
        verdict = b.answered("x", probe_id, at + took)
        assert verdict is not None and verdict.change is None
    assert b.states["x"].streak == 1 and not b.states["x"].held


def test_unknown_and_repeated_answers_are_none() -> None:
    b = book()
    assert b.answered("nobody", 1, 0.0) is None
    b.track("a", now=0.0)
    assert b.answered("a", 9, 1.0) is None  # never sent
    b.due(30.0)
    b.sent("a", 1, 30.0)
    assert b.answered("a", 1, 30.1) is not None
    assert b.answered("a", 1, 30.2) is None  # answered already
    b.sent("gone", 5, 1.0)  # an untracked key: nothing happens
    assert "gone" not in b.states


def test_a_slow_call_brings_the_next_probe_forward_never_back() -> None:
    b = book()
    b.track("a", now=0.0)
    b.slow_call("a", 10.0)
    assert b.next_at() == 10.0
    b.slow_call("a", 20.0)  # already due sooner
    assert b.next_at() == 10.0
    b.slow_call("nobody", 1.0)
    assert b.due(10.0)[0] == ["a"]


def test_a_busy_agent_is_probed_later_not_now() -> None:
    b = book(interval=30.0, slow=5.0)
    b.track("a", now=0.0)
    assert b.due(30.0, busy=lambda key: True) == ([], [])
    assert b.next_at() == 35.0
    b2 = book(interval=2.0, slow=5.0)
    b2.track("a", now=0.0)
    b2.due(2.0, busy=lambda key: True)
    assert b2.next_at() == 4.0  # put off by the shorter of interval and probe_slow
    assert b2.due(4.0, busy=lambda key: False)[0] == ["a"]


def test_forget_and_track_again_start_clean() -> None:
    b = book()
    b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    b.forget("a")
    b.forget("a")
    assert b.next_at() is None and b.due(100.0) == ([], [])
    state = b.track("a", now=100.0, interval=10.0)
    assert state.interval == 10.0 and b.next_at() == 110.0 and not state.outstanding
    view = state.view(112.0)
    assert view == {"interval_s": 10.0, "last_ms": None, "last_ok": None, "ago_s": None,
                    "slow_streak": 0, "sent": 0, "slow": 0, "unanswered": 0}


def test_the_view_reports_the_last_probe() -> None:
    b = book()
    state = b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    b.answered("a", 1, 30.25)
    assert state.view(31.0) == {"interval_s": 30.0, "last_ms": 250.0, "last_ok": True,
                                "ago_s": 0.75, "slow_streak": 0, "sent": 1, "slow": 0,
                                "unanswered": 0}
    assert state.view(29.0)["ago_s"] == 0.0


def test_many_agents_only_the_due_ones_come_up() -> None:
    b = book(interval=10.0, slow=1.0)
    for i in range(100):
        b.track(i, now=i * 0.1)
    send, _ = b.due(10.5)
    assert send == list(range(6))  # due at 10.0 … 10.5
    assert b.next_at() == pytest.approx(10.6)


def test_a_held_agent_is_suspected_whatever_its_beats_say() -> None:
    policy = LivenessPolicy(interval=1.0)
    assert judge(policy, last_beat=10.0, now=10.1, connected=True,
                 held=True) is Liveness.SUSPECTED
    assert judge(policy, last_beat=10.0, now=10.1, connected=True) is Liveness.ONLINE
    assert judge(policy, last_beat=10.0, now=13.5, connected=True,
                 held=True) is Liveness.OFFLINE  # silence still makes it offline


def test_the_field_defaults() -> None:
    """FIELD.md: probe every ~30 s; slower than 5 s twice → remove."""
    policy = ProbePolicy()
    assert (policy.interval, policy.slow, policy.suspect_after, policy.max_outstanding) == (
        30.0, 5.0, 2, 2)
    assert Verdict(slow=False, ms=1.0).late is False and Verdict(slow=True, ms=None).change is None


def test_a_fresh_answer_is_not_late_and_ages_are_rounded_to_the_millisecond() -> None:
    b = book()
    state = b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    verdict = b.answered("a", 1, 30.0001234)
    assert verdict is not None and verdict.late is False and verdict.ms == 0.123
    assert state.view(30.1236)["ago_s"] == 0.123


def test_entries_of_forgotten_or_rescheduled_agents_are_skipped() -> None:
    b = book()
    b.track("gone", now=0.0)
    b.track("kept", now=0.0)
    b.forget("gone")
    assert b.due(30.0)[0] == ["kept"]  # the forgotten one's entry comes up and is skipped
    b.sent("kept", 1, 30.0)
    b.answered("kept", 1, 30.1)
    b.slow_call("kept", 40.0)  # moved earlier: the entry at 60.1 is stale now
    assert b.due(40.0)[0] == ["kept"]
    b.sent("kept", 2, 40.0)
    assert b.answered("kept", 2, 40.1) is not None
    assert b.due(60.1) == ([], [])  # the stale entry: nothing sent twice
    assert b.next_at() == 70.1


def test_a_look_before_the_slow_limit_does_not_judge_the_unanswered_probe() -> None:
    b = book()
    b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    b.slow_call("a", 31.0)  # a look at 31, 4 s before probe 1's limit
    send, verdicts = b.due(31.0)
    assert send == ["a"] and verdicts == []
    b.sent("a", 2, 31.0)
    assert b.next_at() == 35.0
    _, verdicts = b.due(35.0)
    assert verdicts == [("a", Verdict(slow=True, ms=None))]


def test_a_late_answer_while_another_probe_waits_sends_the_next_at_once() -> None:
    b = book()
    b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    send, _ = b.due(35.0)  # probe 1 judged slow; probe 2 goes out
    assert send == ["a"]
    b.sent("a", 2, 35.0)
    late = b.answered("a", 1, 36.0)  # probe 2 still waits, not yet judged
    assert late is not None and late.late
    assert b.states["a"].judged == set()  # nothing judged is left behind
    assert b.next_at() == 36.0
    assert b.due(36.0)[0] == ["a"]


def test_an_answer_of_exactly_probe_slow_is_fast_and_a_late_ok_is_not_ok() -> None:
    b = book()
    b.track("a", now=0.0)
    b.due(30.0)
    b.sent("a", 1, 30.0)
    verdict = b.answered("a", 1, 35.0)
    assert verdict is not None and not verdict.slow and verdict.ms == 5000.0
    b.due(65.0)
    b.sent("a", 2, 65.0)
    verdict = b.answered("a", 2, 70.5, ok=True)
    assert verdict is not None and verdict.slow and b.states["a"].last_ok is False
