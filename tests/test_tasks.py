"""The task state machine, envelope, attempt and task views (reach/tasks.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.chains import Link, Step
from reach.core.tasks import (
    TERMINAL,
    TRANSITIONS,
    Attempt,
    Envelope,
    InvalidTransition,
    Task,
    TaskState,
    can_move,
    new_task,
)

S = TaskState
ALL = list(TaskState)
ALLOWED = [(src, dst) for src in ALL for dst in ALL if dst in TRANSITIONS[src]]
FORBIDDEN = [(src, dst) for src in ALL for dst in ALL if dst not in TRANSITIONS[src]]


def envelope(task_id: str = "t1") -> Envelope:
    return Envelope(task_id=task_id, trace_id="tr1", capability="inventory.query",
                    params={"sku": "A-1"}, caller="alice", idempotency_key="k1")


def task_in(state: TaskState) -> Task:
    task = new_task(envelope(), now=1.0)
    task.state = state  # start directly in ``state``: the table, not the path, is under test
    return task


# ------------------------------------------------------------------ the table itself

def test_table_covers_every_state_and_names_only_states():
    assert set(TRANSITIONS) == set(TaskState)
    for exits in TRANSITIONS.values():
        assert exits <= set(TaskState)


def test_table_is_exactly_the_documented_machine():
    # Pinned so a change to the machine is a deliberate, reviewed change.
    assert TRANSITIONS == {
        # succeeded without a dispatch: answered by the task's fallback (issue 13)
        # and any unfinished state → cancelled, by its caller or an operator (issue 27)
        S.PENDING: {S.QUEUED, S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED, S.DEAD,
                    S.CANCELLED},
        S.QUEUED: {S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED, S.DEAD, S.CANCELLED},
        S.DISPATCHED: {S.RUNNING, S.SUCCEEDED, S.FAILED, S.RETRYING, S.DEAD, S.QUEUED,
                       S.DISPATCHED, S.CANCELLED},
        S.RUNNING: {S.SUCCEEDED, S.FAILED, S.RETRYING, S.DEAD, S.QUEUED, S.DISPATCHED,
                    S.CANCELLED},
        S.RETRYING: {S.QUEUED, S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED,
                     S.DEAD, S.CANCELLED},  # another backoff; or a fallback
        S.SUCCEEDED: set(),
        S.FAILED: set(),
        S.DEAD: {S.PENDING},
        S.CANCELLED: set(),
    }


def test_terminal_states_have_no_exit_except_replay_of_dead():
    assert TERMINAL == {S.SUCCEEDED, S.FAILED, S.DEAD, S.CANCELLED}
    assert TRANSITIONS[S.SUCCEEDED] == frozenset()
    assert TRANSITIONS[S.FAILED] == frozenset()
    assert TRANSITIONS[S.CANCELLED] == frozenset()
    assert TRANSITIONS[S.DEAD] == frozenset({S.PENDING})


def test_nothing_goes_back_to_pending_except_replay():
    into_pending = [src for src in ALL if S.PENDING in TRANSITIONS[src]]
    assert into_pending == [S.DEAD]


def test_every_active_state_can_reach_a_terminal_one():
    for src in (S.PENDING, S.QUEUED, S.DISPATCHED, S.RUNNING, S.RETRYING):
        assert TRANSITIONS[src] & {S.FAILED, S.DEAD}, src


def test_can_move_agrees_with_the_table():
    for src, dst in itertools.product(ALL, ALL):
        assert can_move(src, dst) is (dst in TRANSITIONS[src])


# ------------------------------------------------------------------ Task.move

@pytest.mark.parametrize(("src", "dst"), ALLOWED, ids=lambda s: s.value)
def test_every_allowed_transition_moves_and_records(src, dst):
    task = task_in(src)
    before = list(task.history)
    task.move(dst, now=42.5, note=f"{src.value}->{dst.value}")
    assert task.state is dst
    assert task.updated_at == 42.5
    assert task.history == before + [(dst.value, 42.5, f"{src.value}->{dst.value}")]


@pytest.mark.parametrize(("src", "dst"), FORBIDDEN, ids=lambda s: s.value)
def test_every_forbidden_transition_raises_and_changes_nothing(src, dst):
    task = task_in(src)
    history, updated = list(task.history), task.updated_at
    with pytest.raises(InvalidTransition) as info:
        task.move(dst, now=99.0, note="nope")
    assert task.state is src
    assert task.history == history
    assert task.updated_at == updated
    # The message names the task and both states so the bug is findable from a log line.
    assert str(info.value) == f"t1: {src.value} -> {dst.value}"


def test_invalid_transition_is_a_value_error():
    assert issubclass(InvalidTransition, ValueError)


def test_default_note_is_empty():
    task = new_task(envelope(), now=0.0)
    task.move(S.QUEUED, now=1.0)
    assert task.history[-1] == ("queued", 1.0, "")


@pytest.mark.parametrize("terminal", [S.SUCCEEDED, S.FAILED])
def test_succeeded_and_failed_are_final(terminal):
    task = task_in(terminal)
    assert task.terminal
    for dst in ALL:
        with pytest.raises(InvalidTransition):
            task.move(dst, now=5.0)


def test_dead_letter_replays_to_pending_and_runs_again():
    task = new_task(envelope(), now=0.0)
    for i, dst in enumerate([S.QUEUED, S.DISPATCHED, S.RUNNING, S.DEAD], start=1):
        task.move(dst, now=float(i))
    assert task.terminal
    task.move(S.PENDING, now=10.0, note="replay")
    assert not task.terminal
    task.move(S.DISPATCHED, now=11.0)
    task.move(S.SUCCEEDED, now=12.0)
    assert [h[0] for h in task.history] == [
        "pending", "queued", "dispatched", "running", "dead", "pending", "dispatched",
        "succeeded"]
    assert task.history[5] == ("pending", 10.0, "replay")


def test_terminal_property_matches_terminal_set():
    for state in ALL:
        assert task_in(state).terminal is (state in TERMINAL)


# ------------------------------------------------------------------ random walks

@st.composite
def walks(draw):
    """A walk through allowed transitions from pending, with non-decreasing times and notes."""
    steps = []
    state = S.PENDING
    t = draw(st.floats(min_value=0, max_value=1e6, allow_nan=False))
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        exits = sorted(TRANSITIONS[state], key=lambda s: s.value)
        if not exits:
            break
        state = draw(st.sampled_from(exits))
        t += draw(st.floats(min_value=0, max_value=1000, allow_nan=False))
        steps.append((state, t, draw(st.text(max_size=8))))
    return steps


@settings(max_examples=150, deadline=None)
@given(start=st.floats(min_value=0, max_value=1e6, allow_nan=False), steps=walks())
def test_random_walks_keep_history_consistent(start, steps):
    task = new_task(envelope(), now=start)
    assert task.history == [("pending", start, "accepted")]
    for state, t, note in steps:
        task.move(state, now=t, note=note)
        assert task.state is state
        assert task.history[-1] == (state.value, t, note)
        assert task.updated_at == t
    assert len(task.history) == 1 + len(steps)
    assert task.history[1:] == [(s.value, t, n) for s, t, n in steps]
    assert task.history[-1][0] == task.state.value
    # Every recorded step is itself a legal transition from the one before it.
    for (a, _, _), (b, _, _) in itertools.pairwise(task.history):
        assert can_move(S(a), S(b))
    # The view shows the same history in order.
    assert [(h["state"], h["at"], h["note"]) for h in task.view()["history"]] == task.history


@settings(max_examples=100, deadline=None)
@given(src=st.sampled_from(ALL), dst=st.sampled_from(ALL))
def test_move_succeeds_exactly_when_the_table_allows(src, dst):
    task = task_in(src)
    if dst in TRANSITIONS[src]:
        task.move(dst, now=3.0)
        assert task.state is dst
    else:
        with pytest.raises(InvalidTransition):
            task.move(dst, now=3.0)
        assert task.state is src


# ------------------------------------------------------------------ envelope, attempt, view

def test_new_task_starts_pending_with_accepted_entry():
    task = new_task(envelope("abc"), now=7.0)
    assert task.state is S.PENDING
    assert task.task_id == "abc"
    assert task.updated_at == 7.0
    assert task.history == [("pending", 7.0, "accepted")]
    assert task.attempts == [] and task.result is None and task.error is None


def test_envelope_to_dict_has_every_field_and_defaults():
    env = envelope()
    assert env.to_dict() == {
        "task_id": "t1", "trace_id": "tr1", "capability": "inventory.query",
        "params": {"sku": "A-1"}, "caller": "alice", "idempotency_key": "k1",
        "priority": 5, "timeout": None, "max_retries": 2, "created_at": 0.0,
        "parent_task_id": None, "traceparent": None,
    }


def test_attempt_to_dict_duration_in_ms_and_open_attempt():
    done = Attempt(number=1, agent_id="a1", agent="inv", started_at=10.0, ended_at=10.25,
                   outcome="ok")
    assert done.to_dict() == {
        "number": 1, "agent_id": "a1", "agent": "inv", "started_at": 10.0, "ended_at": 10.25,
        "duration_ms": 250.0, "outcome": "ok", "error": None, "instance": None,
        "timeout": None}
    running = Attempt(number=2, agent_id="a2", agent="inv", started_at=11.0)
    view = running.to_dict()
    assert view["duration_ms"] is None
    assert view["outcome"] == "running"


def test_task_view_merges_envelope_state_attempts_and_history():
    task = new_task(envelope(), now=1.0)
    task.move(S.DISPATCHED, now=2.0, note="to inv")
    task.attempts.append(Attempt(number=1, agent_id="a1", agent="inv", started_at=2.0,
                                 ended_at=3.0, outcome="ok"))
    task.move(S.SUCCEEDED, now=3.0)
    task.result = {"qty": 3}
    view = task.view()
    assert view["task_id"] == "t1" and view["capability"] == "inventory.query"
    assert view["state"] == "succeeded"
    assert view["result"] == {"qty": 3}
    assert view["error"] is None
    assert view["updated_at"] == 3.0
    assert view["attempts"] == [task.attempts[0].to_dict()]
    assert view["history"] == [
        {"state": "pending", "at": 1.0, "note": "accepted"},
        {"state": "dispatched", "at": 2.0, "note": "to inv"},
        {"state": "succeeded", "at": 3.0, "note": ""},
    ]


# ------------------------------------------------------------------ where an outcome goes

THEN = (Step("report.write"), Step("mail.send", {"to": "/owner"}))
THEN_JSON = ["report.write", {"capability": "mail.send", "map": {"to": "/owner"}}]
ENVELOPE_KEYS = {"task_id", "trace_id", "capability", "params", "caller", "idempotency_key",
                 "priority", "timeout", "max_retries", "created_at", "parent_task_id",
                 "traceparent"}
VIEW_KEYS = ENVELOPE_KEYS | {"state", "result", "error", "attempts", "history", "updated_at",
                             "fallback"}


def test_a_task_that_only_answers_its_caller_shows_nothing_else() -> None:
    """No webhook, no chain: the stored ``follow`` column is empty and neither the envelope's
    dict nor the status a caller reads has a ``notify``, ``then`` or ``chain`` key."""
    task = new_task(envelope(), now=1.0)
    assert task.envelope.follow() == {}
    assert set(task.envelope.to_dict()) == ENVELOPE_KEYS
    assert set(task.view()) == VIEW_KEYS


@pytest.mark.parametrize(("notify", "then", "link", "follow"), [
    ("https://hooks.example/reach", (), None, {"notify": "https://hooks.example/reach"}),
    (None, THEN, None, {"then": THEN_JSON}),
    (None, (), Link("t0", 2, 3), {"chain": {"head": "t0", "step": 2, "of": 3}}),
    ("https://hooks.example/reach", THEN, Link("t0", 1, 3),
     {"notify": "https://hooks.example/reach", "then": THEN_JSON,
      "chain": {"head": "t0", "step": 1, "of": 3}}),
], ids=["webhook", "chain-head", "chain-step", "all-three"])
def test_where_an_outcome_goes_besides_its_caller_is_stored_and_shown(
        notify: str | None, then: tuple[Step, ...], link: Link | None,
        follow: dict[str, Any]) -> None:
    """Each of a webhook URL, the chain's steps after a task and its place in a chain is in
    what the store keeps (``follow``) and in the envelope's dict, alone or together."""
    env = envelope()
    env.notify, env.then, env.link = notify, then, link
    assert env.follow() == follow
    assert env.to_dict() == {**envelope().to_dict(), **follow}


def test_a_chain_head_shows_its_place_and_the_step_its_success_started() -> None:
    """A head (steps after it, no link of its own) is step 1 of them all; once its success
    started the next step, its status names that step's task."""
    env = envelope("head")
    env.then = THEN
    task = new_task(env, now=1.0)
    assert task.view()["chain"] == {"head": "head", "step": 1, "of": 3}
    task.move(S.DISPATCHED, now=2.0)
    task.move(S.SUCCEEDED, now=3.0)
    task.history.append(("succeeded", 3.0, "then: next step is task step-2"))
    view = task.view()
    assert view["chain"] == {"head": "head", "step": 1, "of": 3, "next": "step-2"}
    assert view["then"] == THEN_JSON and "notify" not in view


def test_a_chain_step_shows_its_own_place_and_a_webhook_task_shows_no_chain() -> None:
    env = envelope("step-2")
    env.link = Link("head", 2, 3)
    assert new_task(env, now=1.0).view()["chain"] == {"head": "head", "step": 2, "of": 3}
    hooked = envelope("hooked")
    hooked.notify = "https://hooks.example/reach"
    view = new_task(hooked, now=1.0).view()
    assert view["notify"] == "https://hooks.example/reach"
    assert set(view) == VIEW_KEYS | {"notify"}
