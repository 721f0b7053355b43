"""A submit's life in the backlog (issue 27), with plain calls: it waits its turn for a slot
or an agent until its deadline (else ``max_wait`` from its submit), spends no retry on the
wait, and ends as a dead letter, not a refusal, when the wait is over."""

from __future__ import annotations

import random

from test_life import CAP, Rules, agent, only, task

from reach.core import policy
from reach.core.life import (
    Dispatch,
    Finish,
    Life,
    Move,
    NoneFits,
    Pick,
    Picked,
    Refused,
    WaitAgents,
    WaitedOut,
    Woke,
)
from reach.core.life_events import CountRejected
from reach.core.tasks import TaskState
from reach.errors import InvalidParams, ReachTimeout, Rejected, Unavailable

S = TaskState
NONE = Unavailable("1 agent(s) declare 'work.do' but none can take it now: a disconnected")


def submitted(**env: object) -> Life:
    env.setdefault("queue_wait", None)
    env.setdefault("fail_fast", False)
    return Life(task(**env), Rules(max_wait=60.0), random.Random(0))


def test_a_submit_picks_with_its_backlog_s_end() -> None:
    one = submitted()
    assert one.start(10.0, 0.0) == [Pick(frozenset(), None, 70.0)]
    timed = submitted(timeout=5.0)
    assert timed.start(10.0, 0.0) == [Pick(frozenset(), 15.0, 70.0)]


def test_max_wait_runs_from_the_submit_across_a_restart() -> None:
    one = submitted(created_at=100.0)
    one.task.history.append((S.PENDING.value, 140.0, "resumed"))
    # 40 s of wall time went by since the submit: 20 s of max_wait are left
    assert one.start(0.0, 140.0)[-1] == Pick(frozenset(), None, 20.0)


def test_a_call_picks_with_its_own_queue_wait() -> None:
    call = Life(task(), Rules(), random.Random(0))  # (test_life: a call's task)
    assert call.start(10.0, 0.0) == [Pick(frozenset(), None, None)]


def test_no_agent_now_waits_in_queued_without_spending_a_retry() -> None:
    one = submitted()
    one.start(0.0, 0.0)
    assert one.on(NoneFits(NONE), 0.0) == [Move(S.QUEUED, "waiting for an agent"),
                                           WaitAgents(policy.AGENT_POLL)]
    one.task.move(S.QUEUED, 0.0)
    assert one.on(Woke(), 1.0) == [Pick(frozenset(), None, 60.0)]
    assert one.on(NoneFits(NONE), 1.0) == [WaitAgents(policy.AGENT_POLL)]  # queued already
    assert one.tries.retries == 0 and one.tries.hops == 0
    a = agent("a")
    assert only(one.on(Picked(a), 2.0)) == Dispatch(a, None, None)


def test_the_wait_for_an_agent_ends_at_the_deadline_or_max_wait() -> None:
    timed = submitted(timeout=1.5)
    timed.start(0.0, 0.0)
    timed.on(NoneFits(NONE), 0.0)
    assert timed.on(NoneFits(NONE), 1.0)[-1] == WaitAgents(0.5)  # only to the deadline
    finish = only(timed.on(Woke(), 1.5))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert isinstance(finish.error, ReachTimeout)

    one = submitted()
    one.start(0.0, 0.0)
    one.task.move(S.QUEUED, 0.0)
    assert one.on(NoneFits(NONE), 59.5) == [WaitAgents(0.5)]
    finish = only(one.on(NoneFits(NONE), 60.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert isinstance(finish.error, Unavailable)
    assert str(finish.error).startswith(f"no agent could take {CAP!r} while the task waited")
    assert "a disconnected" in str(finish.error)


def test_a_call_that_asked_to_wait_waits_for_an_agent_as_long_as_it_asked() -> None:
    call = Life(task(queue_wait=2.0, fail_fast=False), Rules(), random.Random(0))
    assert call.start(0.0, 0.0) == [Pick(frozenset(), None, None)]
    assert call.on(NoneFits(NONE), 0.0)[-1] == WaitAgents(min(2.0, policy.AGENT_POLL))
    finish = only(call.on(NoneFits(NONE), 2.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD


def test_a_call_that_did_not_ask_to_wait_retries_as_before() -> None:
    call = Life(task(), Rules(), random.Random(0))
    call.start(0.0, 0.0)
    assert call.on(NoneFits(NONE), 0.0)[0] == Move(S.RETRYING, f"retry 1 in 500 ms: {NONE}")


def test_a_wait_in_the_backlog_that_is_over_is_a_dead_letter_not_a_rejection() -> None:
    one = submitted()
    one.start(0.0, 0.0)
    error = ReachTimeout("it waited 60.0s in the backlog")
    assert one.on(WaitedOut(error), 60.0) == [Finish(S.DEAD, error=error)]
    assert one.ended


def test_a_refusal_of_the_task_itself_fails_it_uncounted_as_back_pressure() -> None:
    one = submitted()
    one.start(0.0, 0.0)
    error = InvalidParams("n: 'two' is not of type 'integer'")
    assert one.on(Refused(error), 1.0) == [Finish(S.FAILED, error=error)]
    shed = submitted()
    shed.start(0.0, 0.0)
    full = Rejected("shed")
    assert shed.on(Refused(full), 1.0) == [CountRejected(), Finish(S.FAILED, error=full)]


def test_a_replay_s_max_wait_runs_from_the_replay() -> None:
    one = submitted(created_at=100.0)
    one.task.history.append((S.PENDING.value, 5000.0, "replayed after: unavailable"))
    assert one.start(0.0, 5000.0) == [Pick(frozenset(), None, 60.0)]  # new work: a full wait


def test_a_resumed_task_s_wait_counts_every_second_since_its_submit() -> None:
    half = submitted(created_at=100.0)
    half.task.history.append((S.PENDING.value, 100.5, "resumed"))
    assert half.start(0.0, 100.5)[-1] == Pick(frozenset(), None, 59.5)  # half a second gone
    ahead = submitted(created_at=200.0)  # a wall clock behind the submit's: nothing gone
    ahead.task.history.append((S.PENDING.value, 150.0, "resumed"))
    assert ahead.start(0.0, 150.0)[-1] == Pick(frozenset(), None, 60.0)
