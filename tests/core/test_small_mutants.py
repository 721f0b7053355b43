"""The small pure modules, pinned at their edges (issue 17's mutation run): liveness
thresholds, the task state machine and its views, counts and caller-scoped keys."""

from __future__ import annotations

import pytest

from reach.core import counts
from reach.core.keys import in_scope, revised, revision, scoped_key, unscoped_key
from reach.core.liveness import Liveness, LivenessPolicy, StallGuard, deadline, judge
from reach.core.tasks import (
    TERMINAL,
    Attempt,
    Envelope,
    InvalidTransition,
    SubmitRequest,
    TaskState,
    can_move,
    new_task,
)
from reach.core.trust import Trust, may_read
from reach.errors import Unauthorized

S = TaskState
ON, SUS, OFF = Liveness.ONLINE, Liveness.SUSPECTED, Liveness.OFFLINE

# ------------------------------------------------------------------ liveness


def test_liveness_policy_defaults_and_validation():
    p = LivenessPolicy()
    assert (p.interval, p.suspect_after, p.offline_after) == (10.0, 2.0, 3.0)
    LivenessPolicy(interval=0.001, suspect_after=3.0, offline_after=3.0)  # equal is allowed
    for bad in ({"interval": 0.0}, {"interval": -1.0}):
        with pytest.raises(ValueError, match="interval must be positive"):
            LivenessPolicy(**bad)
    for bad in ({"suspect_after": 0.0}, {"suspect_after": 3.5}):
        with pytest.raises(ValueError, match="0 < suspect_after <= offline_after"):
            LivenessPolicy(**bad)


@pytest.mark.parametrize(("silence", "expected"), [
    (0.0, ON), (20.0, ON), (20.001, SUS), (30.0, SUS), (30.001, OFF), (500.0, OFF)])
def test_judge_counts_missed_intervals_with_strict_thresholds(silence, expected):
    policy = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)
    assert judge(policy, last_beat=1000.0, now=1000.0 + silence, connected=True) is expected


def test_judge_scales_with_the_interval():
    policy = LivenessPolicy(interval=0.5)
    assert judge(policy, last_beat=10.0, now=11.0, connected=True) is ON  # 2 intervals
    assert judge(policy, last_beat=10.0, now=11.2, connected=True) is SUS
    assert judge(policy, last_beat=10.0, now=11.6, connected=True) is OFF


def test_judge_disconnected_draining_and_both():
    policy = LivenessPolicy()
    fresh = {"last_beat": 5.0, "now": 5.0}
    assert judge(policy, **fresh, connected=False) is SUS
    assert judge(policy, **fresh, connected=True, draining=True) is SUS
    assert judge(policy, **fresh, connected=False, draining=True) is OFF
    assert judge(policy, **fresh, connected=True, draining=False) is ON


def test_deadline_is_when_the_state_may_next_get_worse():
    policy = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)
    assert deadline(policy, ON, 100.0) == 120.0
    assert deadline(policy, SUS, 100.0) == 130.0
    assert deadline(policy, OFF, 100.0) is None
    # ``judge`` agrees: still online at the deadline, suspected just past it.
    assert judge(policy, last_beat=100.0, now=120.0, connected=True) is ON
    assert judge(policy, last_beat=100.0, now=120.01, connected=True) is SUS


# ------------------------------------------------------------------ tasks


def envelope(**kw: object) -> Envelope:
    base: dict[str, object] = {"task_id": "t1", "trace_id": "tr", "capability": "c.d",
                               "params": {"a": 1}, "caller": "alice",
                               "idempotency_key": scoped_key("alice", "k1")}
    base.update(kw)
    return Envelope(**base)  # type: ignore[arg-type]


def test_submit_request_and_envelope_defaults():
    req = SubmitRequest("c.d")
    assert (req.priority, req.params, req.caller, req.max_retries) == (5, {}, "", None)
    env = envelope()
    assert (env.priority, env.max_retries, env.timeout, env.created_at) == (5, 2, None, 0.0)


def test_only_the_table_moves_a_task_and_every_move_is_recorded():
    task = new_task(envelope(), now=10.0)
    assert task.state is S.PENDING and task.updated_at == 10.0
    assert task.history == [("pending", 10.0, "accepted")]
    task.move(S.DISPATCHED, 11.0, "to a1")
    task.move(S.RUNNING, 12.0)
    with pytest.raises(InvalidTransition, match="t1: running -> pending"):
        task.move(S.PENDING, 13.0)
    assert task.state is S.RUNNING and task.updated_at == 12.0  # a refused move changes nothing
    task.move(S.SUCCEEDED, 14.0, "ok")
    assert task.terminal and task.updated_at == 14.0
    assert task.history[1:] == [("dispatched", 11.0, "to a1"), ("running", 12.0, ""),
                                ("succeeded", 14.0, "ok")]


def test_terminal_states_are_final_but_a_dead_letter_replays():
    assert TERMINAL == {S.SUCCEEDED, S.FAILED, S.DEAD, S.CANCELLED}
    for src in (S.SUCCEEDED, S.FAILED, S.CANCELLED):
        assert not any(can_move(src, dst) for dst in S)
    assert [dst for dst in S if can_move(S.DEAD, dst)] == [S.PENDING]
    assert can_move(S.DISPATCHED, S.DISPATCHED)  # re-dispatched (a hedge, a resumed task)
    assert not can_move(S.PENDING, S.RUNNING) and not can_move(S.QUEUED, S.RUNNING)
    assert can_move(S.QUEUED, S.SUCCEEDED)  # answered by its fallback (issue 13)
    task = new_task(envelope(), 0.0)
    assert not task.terminal
    task.move(S.DEAD, 1.0)
    assert task.terminal
    task.move(S.PENDING, 2.0, "replay")
    assert not task.terminal


def test_attempt_view_has_its_duration_in_milliseconds():
    attempt = Attempt(1, "a1", "inventory", started_at=1.0)
    view = attempt.to_dict()
    assert view["duration_ms"] is None and view["outcome"] == "running"
    attempt.ended_at = 1.2345678
    assert attempt.to_dict()["duration_ms"] == 234.568
    attempt.ended_at = 3.0
    assert attempt.to_dict() == {
        "number": 1, "agent_id": "a1", "agent": "inventory", "started_at": 1.0,
        "ended_at": 3.0, "duration_ms": 2000.0, "outcome": "running", "error": None,
        "instance": None, "timeout": None}
    assert Attempt(2, "a1", "inventory", started_at=1.0, timeout=0.36).to_dict()["timeout"] \
        == 0.36  # the completion timeout it was given (kept across a restart)


def test_task_view_shows_the_key_as_the_caller_gave_it():
    task = new_task(envelope(priority=7, timeout=3.0), now=5.0)
    task.attempts.append(Attempt(1, "a1", "inv", started_at=5.5, ended_at=6.0, outcome="ok"))
    task.move(S.DISPATCHED, 5.5)
    task.result = {"n": 1}
    view = task.view()
    assert view["idempotency_key"] == "k1"
    assert view["state"] == "dispatched" and view["result"] == {"n": 1}
    assert view["priority"] == 7 and view["timeout"] == 3.0 and view["updated_at"] == 5.5
    assert view["attempts"][0]["duration_ms"] == 500.0
    assert view["history"] == [{"state": "pending", "at": 5.0, "note": "accepted"},
                               {"state": "dispatched", "at": 5.5, "note": ""}]
    assert view["task_id"] == "t1" == task.task_id


# ------------------------------------------------------------------ counts and keys


def test_counts_keep_a_key_only_while_it_counts_something():
    c: dict[str, int] = {}
    counts.add(c, "x")
    counts.add(c, "x")
    counts.add(c, "y")
    assert c == {"x": 2, "y": 1}
    counts.drop(c, "x")
    assert c == {"x": 1, "y": 1}
    counts.drop(c, "x")
    assert c == {"y": 1}
    counts.drop(c, "never")  # nothing to drop: no key appears
    assert c == {"y": 1}


def test_keys_are_scoped_to_their_caller_and_shown_unscoped():
    assert scoped_key("alice", "k") == "alice/k"
    assert scoped_key("a/b c", "k") == "a%2Fb%20c/k"  # the first "/" separates
    assert unscoped_key("a/b c", scoped_key("a/b c", "k/1")) == "k/1"
    assert unscoped_key("bob", scoped_key("alice", "k")) == "alice/k"  # not bob's: as is


def test_a_key_is_in_scope_for_its_own_caller_or_as_the_tasks_own_id():
    assert in_scope("alice", scoped_key("alice", "k"), "t-1")
    assert in_scope("a/b", scoped_key("a/b", "k"), "t-1")
    assert not in_scope("bob", scoped_key("alice", "k"), "t-1")  # another caller's key
    assert not in_scope("a", scoped_key("a/b", "k"), "t-1")  # "a%2Fb/k" is not a's
    assert not in_scope("alice", "alicek", "t-1")  # a prefix needs the "/"
    assert in_scope("bob", "t-1", "t-1")  # a task submitted without a key
    assert not in_scope("bob", "t-1", "t-2")


def test_only_replays_with_new_params_revise_the_key_agents_see() -> None:
    """A dead letter replayed with new params travels as ``<key>~N``, N the number of such
    replays in its history; a replay as it was, or a note that only mentions new params,
    changes nothing."""
    history = [("pending", 1.0, "accepted"),
               ("pending", 2.0, "replayed by ops"),  # as it was
               ("pending", 3.0, "replayed by ops with new params and timeout 5 s"),
               ("dead", 4.0, "agent said: try again with new params"),  # not a replay
               ("pending", 5.0, "replayed by python with new params")]
    assert revision(history[:3]) == 1
    assert revision(history) == 2
    assert revision(history[:2]) == 0
    assert revised("amy/k", revision(history)) == "amy/k~2"


def test_a_tick_exactly_a_period_late_is_on_time_and_the_patience_is_inclusive() -> None:
    guard = StallGuard(period=0.5, patience=1.0)
    assert guard.may_judge(due=1.0, now=1.5)  # exactly one period late: on time
    assert not guard.may_judge(due=2.0, now=2.75)  # late: wait, from 2.75
    assert guard.may_judge(due=3.0, now=3.75)  # waited exactly the patience: judge


# ------------------------------------------------------------------ trust


def test_trust_open_mode_accepts_any_name_and_only_the_same_process_takes_over():
    trust = Trust.of(None, None, None)
    assert trust.open and trust.calls.rules is None and trust.serves is None
    trust.authenticate(None, "anyone", "caller")  # no raise
    trust.check_serve("anyone", [("x.y", "write")])
    assert trust.may_take_over(old_instance="p1", new_instance="p1")
    assert not trust.may_take_over(old_instance="p1", new_instance="p2")
    assert not trust.may_take_over(old_instance=None, new_instance=None)


def test_trust_tokens_name_principals():
    trust = Trust.of({"t-a": "alice", "t-svc": "*"}, {"alice": ["sales.*"]}, None)
    assert not trust.open
    assert trust.may_take_over(old_instance="p1", new_instance="p2")  # the token proved it
    trust.authenticate("t-a", "alice", "caller")
    trust.authenticate("t-svc", "whoever", "agent")  # "*" may use any name
    with pytest.raises(Unauthorized, match="token not accepted for agent 'alice'") as info:
        trust.authenticate("nope", "alice", "agent")
    assert info.value.details == {"role": "agent", "name": "alice"}
    with pytest.raises(Unauthorized, match="no token given for caller 'alice'") as info:
        trust.authenticate(None, "alice", "caller")
    assert info.value.details == {"role": "caller", "name": "alice"}
    with pytest.raises(Unauthorized, match="belongs to 'alice', not 'bob'"):
        trust.authenticate("t-a", "bob", "caller")
    assert trust.calls.allows("alice", "sales.query", "read")
    assert not trust.calls.allows("alice", "hr.hire", "read")


def test_trust_serve_rules_bound_who_registers_and_what_they_offer():
    trust = Trust.of(None, None, {"inv": ["inventory.*"], "ro": ["scope:read"]})
    trust.check_serve("inv", [("inventory.query", "write"), ("inventory.count", "read")])
    trust.check_serve("ro", [("any.thing", "read")])
    with pytest.raises(Unauthorized, match="'inv' may not serve 'sales.query'") as info:
        trust.check_serve("inv", [("inventory.query", "read"), ("sales.query", "read")])
    assert info.value.details["rule"] == ["inventory.*"]
    assert info.value.details["capability"] == "sales.query"
    with pytest.raises(Unauthorized, match="'ro' may not serve 'any.thing'"):
        trust.check_serve("ro", [("any.thing", "write")])
    with pytest.raises(Unauthorized, match="'evil' may not register as an agent") as info:
        trust.check_serve("evil", [])
    assert info.value.details["rule"] is None
    star = Trust.of(None, None, {"*": ["public.*"]})
    star.check_serve("anyone", [("public.echo", "read")])
    with pytest.raises(Unauthorized, match=r"allow only \['public\.\*'\]"):
        star.check_serve("anyone", [("private.x", "read")])


def test_may_read_owner_and_the_agents_that_ran_it():
    assert may_read("alice", "alice", [])
    assert may_read("agent-1", "alice", ["agent-0", "agent-1"])
    assert not may_read("bob", "alice", ["agent-1"])


def test_every_unfinished_state_may_be_cancelled_and_nothing_else_may():
    for src in S:
        assert can_move(src, S.CANCELLED) == (src not in TERMINAL), src
