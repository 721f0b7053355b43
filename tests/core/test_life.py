"""A task's life (reach.core.life) driven with plain calls: each request answered by hand,
each decision read off the commands it returns. No loop, no clock, no gateway."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from reach.core import policy
from reach.core.agents import AgentRecord
from reach.core.backoff import Backoff
from reach.core.life import (
    AgentIs,
    Budget,
    Charge,
    Command,
    CountRejected,
    CountRetry,
    Dispatch,
    Ended,
    Finish,
    Life,
    LookFor,
    Move,
    NoneFits,
    Pick,
    Picked,
    Refused,
    Sleep,
    Update,
    WaitAgents,
    Woke,
)
from reach.core.tasks import Attempt, Envelope, Outcome, Task, TaskState, new_task
from reach.errors import ReachTimeout, Rejected, TaskFailed, Unavailable

S = TaskState
CAP = "work.do"


@dataclass
class Rules:
    recovery_grace: float = 10.0
    breaker_open_for: float = 5.0
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, jitter=0.0))
    retry_budget: float = 0.2
    retry_budget_window: float = 10.0
    max_wait: float = 60.0


def task(**env: Any) -> Task:
    """A synchronous call's task unless ``queue_wait`` / ``fail_fast`` say otherwise (a
    submit's backlog: tests/core/test_life_backlog.py)."""
    env.setdefault("queue_wait", 0.2)
    env.setdefault("fail_fast", True)
    return new_task(Envelope(task_id="t1", trace_id="tr", capability=CAP, params={},
                             caller="c", idempotency_key="k", **env), 0.0)


def agent(agent_id: str, *, instance: str | None = "p1", node: str | None = None
          ) -> AgentRecord:
    return AgentRecord(agent_id=agent_id, name=agent_id, version="1", max_concurrency=1,
                       capabilities={}, instance=instance, node=node)


def life(**env: Any) -> Life:
    return Life(task(**env), Rules(), random.Random(0))


def ended(life: Life, dispatch: Command, kind: str, payload: Any = None, *,
          idempotent: bool = True, others_left: bool = False, acked: bool = True) -> Ended:
    """What a dispatcher reports for ``dispatch``: the attempt it recorded, and its end."""
    assert isinstance(dispatch, Dispatch)
    record = dispatch.record
    attempt = Attempt(number=len(life.task.attempts) + 1, agent_id=record.agent_id,
                      agent=record.name, started_at=0.0, instance=record.instance)
    life.task.attempts.append(attempt)
    verdict = policy.classify(kind, payload, acked=acked, caller_bound=False)
    attempt.outcome, attempt.error = verdict.name, verdict.error
    return Ended(verdict, payload, attempt, record, idempotent, others_left)


def only(commands: list[Command]) -> Command:
    assert len(commands) == 1, commands
    return commands[0]


def lost_before_its_ack(one: Life, record: AgentRecord) -> list[Command]:
    """Start ``one``; its first attempt, at ``record``, is lost before its ack at 1.0 s (work
    that is not idempotent); what the life does next."""
    one.start(0.0, 0.0)
    first = only(one.on(Picked(record), 0.0))
    return one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0)


def test_a_first_attempt_picks_dispatches_and_ends_with_the_result() -> None:
    one = life()
    assert one.start(0.0, 0.0) == [Pick(frozenset(), None)]
    a = agent("a")
    dispatch = only(one.on(Picked(a), 0.1))
    assert dispatch == Dispatch(a, None, None)
    assert one.on(ended(one, dispatch, "ok", {"x": 1}), 0.2) == \
        [Finish(S.SUCCEEDED, result={"x": 1})]
    assert one.ended and one.on(Woke(), 0.3) == []


def test_a_result_the_gateway_answered_already_needs_no_second_finish() -> None:
    one = life()
    one.start(0.0, 0.0)
    dispatch = only(one.on(Picked(agent("a")), 0.0))
    one.task.move(S.DISPATCHED, 0.0)
    one.task.move(S.SUCCEEDED, 0.1)  # answered as the result came (Gateway.answered)
    assert one.on(ended(one, dispatch, "ok", 1), 0.1) == []
    assert one.ended


def test_a_caller_deadline_rides_on_every_pick_and_dispatch_and_ends_the_task() -> None:
    one = life(timeout=1.0)
    assert one.start(5.0, 0.0) == [Pick(frozenset(), 6.0)]
    error = Unavailable("no agent serves it")
    retry = one.on(NoneFits(error), 5.5)
    assert retry[0] == Move(S.RETRYING, "retry 1 in 500 ms: no agent serves it")
    assert retry[1:] == [Update(), Sleep(0.5)]
    finish = only(one.on(Woke(), 6.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert isinstance(finish.error, ReachTimeout)
    assert "did not complete within 1.0s" in str(finish.error)


def test_a_fault_retries_an_idempotent_task_elsewhere_first_after_the_budget_says_yes() -> None:
    one = life(max_retries=1)
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    assert one.on(ended(one, first, "error", {"message": "boom"}), 0.1) == [Charge()]
    assert one.on(Budget(True), 0.1) == [
        CountRetry("a"), Move(S.RETRYING, "retry 1 in 500 ms: boom"), Update(), Sleep(0.5)]
    # Not "anywhere": the agent that faulted stays excluded.
    assert one.on(Woke(), 0.6) == [Pick(frozenset({"a"}), None)]
    second = only(one.on(Picked(agent("b")), 0.6))
    finish = only(one.on(ended(one, second, "error", {"message": "again"}), 0.7))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert isinstance(finish.error, TaskFailed) and "again" in str(finish.error)


def test_a_spent_retry_budget_dead_letters_the_task_and_says_why() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    one.on(ended(one, first, "error", {"message": "boom"}), 0.1)
    finish = only(one.on(Budget(False), 0.1))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "retry budget (20% of first attempts over 10s) is spent" in str(finish.error)
    assert "last failure: boom" in str(finish.error)


def test_work_that_is_not_idempotent_is_not_retried_after_a_fault() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    finish = only(one.on(ended(one, first, "error", {"message": "boom"}, idempotent=False),
                         0.1))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "boom" in str(finish.error)


def test_an_answer_fails_the_task_with_the_agent_s_own_error() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    error = {"code": "bad_input", "message": "no", "details": {"answer": True}}
    assert one.on(ended(one, first, "error", error), 0.1) == \
        [Finish(S.FAILED, wire_error=error)]


def test_an_undelivered_attempt_fails_over_at_once_while_another_agent_is_left() -> None:
    one = life(max_retries=0)
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    assert one.on(ended(one, first, "unsent", others_left=True), 0.1) == \
        [Pick(frozenset({"a"}), None)]
    assert one.tries.retries == 0  # a fail-over spends no retry
    second = only(one.on(Picked(agent("b")), 0.1))
    # Every candidate tried, no retry left: dead, and it says the agent never got it.
    finish = only(one.on(ended(one, second, "unsent"), 0.2))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "never got the task" in str(finish.error)


def test_once_every_agent_was_tried_an_undelivered_attempt_retries_anywhere() -> None:
    one = life(max_retries=1)
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    assert one.on(ended(one, first, "unsent"), 0.1) == [Charge()]
    assert isinstance(one.on(Budget(True), 0.1)[-1], Sleep)
    assert one.on(Woke(), 1.0) == [Pick(frozenset(), None)]  # tried agents allowed again


def test_a_full_holder_is_a_free_fail_over_not_a_hop() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a", node="n2")), 0.0))
    assert one.tries.hops == 1
    assert one.on(ended(one, first, "full"), 0.1) == [Pick(frozenset({"a"}), None)]
    assert one.tries.hops == 0


def test_work_lost_before_its_ack_goes_back_to_the_same_process_alone() -> None:
    one = life()
    one.start(0.0, 0.0)
    a = agent("a", instance="p1")
    first = only(one.on(Picked(a), 0.0))
    assert one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0) == \
        [LookFor("a")]
    # Not back yet: it waits and looks again, within the recovery grace.
    assert one.on(AgentIs(None, False, False), 1.0) == [WaitAgents(policy.RECOVERY_POLL)]
    assert one.on(Woke(), 1.5) == [LookFor("a")]
    assert one.on(AgentIs(a, True, False), 1.5) == [Dispatch(a, None, None)]


def test_sent_back_and_never_arriving_it_still_waits_for_that_process_alone() -> None:
    """The second attempt's proof of non-delivery says nothing of the first one, which may
    be running there: no fail-over, no retry elsewhere (found by test_life_any_order)."""
    one = life(max_retries=2)
    one.start(0.0, 0.0)
    a = agent("a", instance="p1")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0)
    again = only(one.on(AgentIs(a, True, False), 1.0))
    assert one.on(ended(one, again, "unsent", idempotent=False, others_left=True), 2.0) == \
        [WaitAgents(policy.RECOVERY_POLL)]
    assert one.on(Woke(), 2.5) == [LookFor("a")]
    third = only(one.on(AgentIs(a, True, False), 2.5))
    finish = only(one.on(ended(one, third, "unsent", idempotent=False, others_left=True),
                         11.5))  # the recovery grace from the first loss is over
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "attempt 1" in str(finish.error) and "may have started the work" in str(finish.error)


def test_work_lost_before_its_ack_is_not_sent_to_a_new_process_of_that_agent() -> None:
    one = life()
    lost_before_its_ack(one, agent("a", instance="p1"))
    finish = only(one.on(AgentIs(agent("a", instance="p2"), True, False), 1.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "restarted while it was running" in str(finish.error)
    assert "not idempotent" in str(finish.error)


def test_work_lost_before_its_ack_at_an_agent_that_never_comes_back_is_dead() -> None:
    one = life()
    lost_before_its_ack(one, agent("a"))
    finish = only(one.on(AgentIs(None, False, False), 11.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "did not come back within 10.0s" in str(finish.error)


def test_work_lost_before_its_ack_at_an_agent_with_no_process_id_may_have_run() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a", instance=None)), 0.0))
    finish = only(one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "may have started the work" in str(finish.error)


def test_an_idempotent_task_whose_agent_came_back_as_a_new_process_runs_anywhere() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a", node="n2")), 0.0))
    # Lost at a peer-held agent: back to it, even for idempotent work.
    assert one.on(ended(one, first, "lost"), 1.0) == [LookFor("a")]
    assert one.on(AgentIs(agent("a", instance="p2"), True, True), 1.0) == \
        [Pick(frozenset(), None)]


def test_a_second_loss_on_the_way_back_waits_for_the_agents_to_change() -> None:
    one = life()
    one.start(0.0, 0.0)
    a = agent("a", node="n2")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost"), 1.0)
    again = only(one.on(AgentIs(a, True, True), 1.0))
    assert one.on(ended(one, again, "lost"), 2.0) == [WaitAgents(policy.RECOVERY_POLL)]
    assert one.on(Woke(), 2.5) == [LookFor("a")]
    # Past the window (10 s from the first loss) a loss is judged like any other.
    back = only(one.on(AgentIs(a, True, True), 2.5))
    assert one.on(ended(one, back, "lost", others_left=False), 12.0) == [Charge()]


def test_a_refused_task_is_counted_and_fails() -> None:
    one = life()
    one.start(0.0, 0.0)
    error = Rejected("every agent is at its max_concurrency")
    assert one.on(Refused(error), 0.1) == [CountRejected(), Finish(S.FAILED, error=error)]


@pytest.mark.parametrize("now", [0.0, 0.1])  # (also at the instant it was accepted)
def test_a_task_with_a_fallback_degrades_at_once_when_no_agent_fits(now: float) -> None:
    one = life(fallback=object())
    one.start(0.0, 0.0)
    error = Unavailable("none")
    assert one.on(NoneFits(error, breaker_wait=1.0), now) == [Finish(S.DEAD, error=error)]


def test_breaker_waits_are_spent_from_an_allowance_but_a_probe_s_wait_is_not() -> None:
    one = life()
    one.start(0.0, 0.0)
    error = Unavailable("every breaker is open")
    assert one.on(NoneFits(error, breaker_wait=2.0), 0.0) == [WaitAgents(2.0)]
    one.on(Woke(), 2.0)
    assert one.allowance == 3.0
    assert one.on(NoneFits(error, breaker_wait=10.0, probing=True), 2.0) == [WaitAgents(3.0)]
    one.on(Woke(), 5.0)
    assert one.allowance == 3.0  # waiting on a probe's verdict spends nothing
    assert one.on(NoneFits(error, breaker_wait=10.0), 5.0) == [WaitAgents(3.0)]
    one.on(Woke(), 8.0)
    # Spent: no breaker is worth waiting for any more; it retries like "no agent".
    assert one.on(NoneFits(error, breaker_wait=10.0), 8.0)[0] == \
        Move(S.RETRYING, "retry 1 in 500 ms: every breaker is open")
    assert one.tries.hops == 0  # waits spend no hop


def resumed(max_retries: int, *, timeout: float | None = None) -> Life:
    t = task(max_retries=max_retries, timeout=timeout, created_at=100.0)
    t.move(S.DISPATCHED, 100.0, "attempt 1 to a")
    t.attempts.append(Attempt(number=1, agent_id="a", agent="a", started_at=100.0,
                              outcome=Outcome.LOST.value, instance="p1", timeout=3.0))
    t.history.append((S.PENDING.value, 101.0, "resumed"))
    return Life(t, Rules(), random.Random(0))


def test_a_resumed_task_goes_back_to_its_agent_as_a_retry_and_keeps_its_timeout() -> None:
    one = resumed(2)
    assert one.start(0.0, 104.0) == [
        Move(S.RETRYING, "retry 1: the coordinator restarted during attempt 1"), LookFor("a")]
    a = agent("a", instance="p1")
    assert one.on(AgentIs(a, True, False), 0.0) == [Dispatch(a, None, 3.0)]
    assert (one.tries.retries, one.tries.hops) == (1, 2)


def test_a_resumed_task_s_deadline_runs_from_its_submit() -> None:
    one = resumed(2, timeout=10.0)
    commands = one.start(50.0, 104.0)
    assert commands[-1] == LookFor("a")
    assert one.deadline == 56.0


def test_a_resumed_task_interrupted_in_its_last_try_is_not_sent_again() -> None:
    one = resumed(0)
    finish = only(one.start(0.0, 104.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD
    assert "its last (max_retries 0); not sent again" in str(finish.error)


def test_a_resumed_task_waits_out_the_recovery_grace_when_no_agent_fits() -> None:
    t = task(created_at=100.0)
    t.history.append((S.PENDING.value, 101.0, "resumed"))
    one = Life(t, Rules(), random.Random(0))
    assert one.start(0.0, 101.0) == [Pick(frozenset(), None)]
    assert one.on(NoneFits(Unavailable("not yet")), 9.75) == [WaitAgents(0.25)]


def test_something_that_is_not_an_event_is_refused() -> None:
    one = life()
    one.start(0.0, 0.0)
    with pytest.raises(TypeError, match="not an event"):
        one.on(Pick(frozenset(), None), 0.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------- edges of each rule


def test_a_breaker_wait_spends_only_the_time_it_lasted() -> None:
    one = life()
    one.start(0.0, 0.0)
    error = Unavailable("every breaker is open")
    assert one.on(NoneFits(error, breaker_wait=1.0), 1.0) == [WaitAgents(1.0)]
    one.on(Woke(), 2.5)  # waited 1.5 s, from 1.0
    assert one.allowance == 3.5
    # What is left of the allowance still caps the next wait, even below a second.
    one.on(NoneFits(error, breaker_wait=10.0), 2.5)
    one.on(Woke(), 5.5)
    assert one.on(NoneFits(error, breaker_wait=10.0), 5.5) == [WaitAgents(0.5)]


def test_a_breaker_wait_never_outlasts_the_caller_s_deadline() -> None:
    one = life(timeout=1.0)
    one.start(5.0, 0.0)
    error = Unavailable("every breaker is open")
    assert one.on(NoneFits(error, breaker_wait=2.0), 5.5) == [WaitAgents(0.5)]


def test_a_backoff_never_outlasts_the_caller_s_deadline() -> None:
    one = life(timeout=1.0)
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    one.on(ended(one, first, "error", {"message": "boom"}), 0.9)
    assert one.on(Budget(True), 0.9)[1] == Move(S.RETRYING, "retry 1 in 100 ms: boom")


def test_a_fail_over_to_another_agent_is_a_hop() -> None:
    one = life()
    one.start(0.0, 0.0)
    first = only(one.on(Picked(agent("a")), 0.0))
    one.on(ended(one, first, "unsent", others_left=True), 0.1)
    assert one.tries.hops == 1


def test_an_agent_not_ready_is_waited_for_while_any_grace_is_left() -> None:
    one = life()
    lost_before_its_ack(one, agent("a"))
    assert one.on(AgentIs(None, False, False), 10.5) == [WaitAgents(0.5)]


def test_once_back_at_its_agent_a_retry_picks_anew() -> None:
    one = resumed(2)
    one.start(0.0, 104.0)
    a = agent("a", instance="p1")
    again = only(one.on(AgentIs(a, True, True), 0.0))
    one.on(ended(one, again, "error", {"message": "boom"}), 0.1)
    one.on(Budget(True), 0.1)
    assert one.on(Woke(), 1.0) == [Pick(frozenset({"a"}), None)]


def test_a_second_loss_on_the_way_back_keeps_waiting_within_the_grace() -> None:
    one = life()
    one.start(0.0, 0.0)
    a = agent("a", node="n2")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost"), 1.0)  # back until 11.0
    again = only(one.on(AgentIs(a, True, True), 1.0))
    one.on(ended(one, again, "lost"), 2.0)
    one.on(Woke(), 2.5)
    assert one.on(AgentIs(None, False, True), 2.5) == [WaitAgents(0.5)]


def test_a_loss_at_the_end_of_the_back_window_is_judged_like_any_other() -> None:
    one = life()
    one.start(0.0, 0.0)
    a = agent("a", node="n2")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost"), 1.0)  # back until 11.0
    again = only(one.on(AgentIs(a, True, True), 1.0))
    assert one.on(ended(one, again, "lost"), 11.0) == [Charge()]


def test_lost_again_at_the_end_of_the_grace_work_that_is_not_idempotent_is_dead() -> None:
    one = life()
    one.start(0.0, 0.0)
    a = agent("a")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0)  # until 11.0
    again = only(one.on(AgentIs(a, True, False), 1.0))
    finish = only(one.on(ended(one, again, "lost", idempotent=False, acked=False), 11.0))
    assert isinstance(finish, Finish) and finish.state is S.DEAD


def test_the_attempt_held_is_the_first_that_may_have_run() -> None:
    one = life(max_retries=3)
    one.start(0.0, 0.0)
    a = agent("a")
    first = only(one.on(Picked(a), 0.0))
    one.on(ended(one, first, "lost", idempotent=False, acked=False), 1.0)
    second = only(one.on(AgentIs(a, True, False), 1.0))
    one.on(ended(one, second, "lost", idempotent=False, acked=False), 2.0)
    one.on(Woke(), 2.5)
    third = only(one.on(AgentIs(a, True, False), 2.5))
    finish = only(one.on(ended(one, third, "unsent", idempotent=False, others_left=True),
                         12.0))
    assert isinstance(finish, Finish) and "attempt 1 " in str(finish.error)
