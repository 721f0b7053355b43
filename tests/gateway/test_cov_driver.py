"""The driver's failure paths, on the fakes of ``test_decisions``: a task's own deadline
running out while it waits, a resumed task whose agent is busy, restarted or never back, an
exception inside the driver (the internal-error guard), an answer the gateway could not take,
and what the driver does with each step the policy gives it."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import pytest
from test_decisions import Rig, fault, ok, outcomes, resumed, retries

from reach.core import policy
from reach.core.resilience import BreakerState
from reach.core.routing import Router
from reach.core.tasks import Outcome, SubmitRequest, TaskState
from reach.errors import Unavailable

S = TaskState


@pytest.fixture
async def rig() -> Any:
    r = Rig()
    yield r
    await r.close()


# ---------------------------------------------------------------- the task's own deadline


async def test_a_deadline_that_ends_a_wait_for_a_breaker_dead_letters_with_a_timeout() -> None:
    rig = Rig(breaker_open_for=2.0)
    try:
        record, link = rig.agent("a", ok, idempotent=True)
        rig.gateway.dispatch.health["x.work"] = deque([True] * 20, maxlen=50)  # mostly healthy
        record.breaker.state, record.breaker.opened_at = BreakerState.OPEN, rig.clock.wall()
        record.breaker.rested = True
        task = await rig.submit(timeout=0.5)
        await rig.clock.advance(0.49)
        assert not task.terminal  # waiting for the breaker, within the deadline
        await rig.clock.advance(0.01)
        assert task.state is S.DEAD and task.error is not None
        assert task.error["code"] == "timeout"
        assert task.error["message"] == "'x.work' did not complete within 0.5s"
        assert not link.delivered and task.attempts == []
        assert task.updated_at - task.envelope.created_at == pytest.approx(0.5)
    finally:
        await rig.close()


async def test_a_deadline_shorter_than_queue_wait_ends_the_wait_for_a_slot() -> None:
    rig = Rig(queue_wait=5.0)
    try:
        rig.agent("a", lambda w: "hang", max_concurrency=1)
        first = await rig.submit()
        second = await rig.submit(timeout=0.3, call=True)
        assert first.state is S.RUNNING and second.state is S.QUEUED
        await rig.clock.advance(0.29)
        assert second.state is S.QUEUED
        await rig.clock.advance(0.01)  # its deadline, long before queue_wait
        assert second.state is S.FAILED and second.error is not None
        assert second.error["code"] == "rejected"
        assert "max_concurrency" in second.error["message"]
        assert first.state is S.RUNNING
    finally:
        await rig.close()


# ---------------------------------------------------------------- after a restart


async def test_a_resumed_task_with_no_attempt_waits_for_agents_within_the_grace() -> None:
    rig = Rig(recovery_grace=2.0)
    try:
        from reach.core.tasks import Envelope, new_task
        now = rig.clock.wall()
        task = new_task(Envelope(task_id="t-early", trace_id="tr", capability="x.work",
                                 params={}, caller="tester", idempotency_key="tester/k",
                                 created_at=now), now)
        rig.gateway.resume(task)  # crashed before its first attempt: nothing to go back to
        await rig.clock.advance(1.2)
        assert not task.terminal and task.attempts == []
        _, link = rig.agent("late", ok)  # an agent reconnects within the grace
        await rig.clock.settle()
        assert task.state is S.SUCCEEDED and outcomes(task) == [("late", Outcome.OK)]
        assert retries(task) == 0 and len(link.delivered) == 1
    finally:
        await rig.close()


async def test_a_resumed_task_waits_while_its_agent_is_busy_then_goes_back_to_it() -> None:
    rig = Rig(recovery_grace=5.0)
    try:
        a, a_link = rig.agent("a", ok, max_concurrency=1, weight=1)
        rig.agent("b", ok, weight=1000)
        a.inflight = 1  # back, but every slot taken
        task = resumed(rig, a, instance=None)
        await rig.clock.advance(1.0)
        assert not task.terminal and not a_link.delivered
        a.inflight = 0
        await rig.clock.advance(0.5)  # the next recovery poll finds it free
        assert task.state is S.SUCCEEDED
        assert outcomes(task) == [("a", Outcome.LOST), ("a", Outcome.OK)]
    finally:
        await rig.close()


async def test_an_idempotent_task_whose_agent_restarted_runs_again_elsewhere(rig: Rig) -> None:
    a, a_link = rig.agent("a", ok, idempotent=True, weight=1)
    a.instance = "p2"  # a new process under the old name: its key cache is gone
    _, b_link = rig.agent("b", ok, idempotent=True, weight=1000)
    task = resumed(rig, a, instance="p1")
    await rig.clock.settle()
    # Safe to run anywhere: no longer bound to "a", the router picks (by weight, "b").
    assert task.state is S.SUCCEEDED and task.error is None
    assert outcomes(task) == [("a", Outcome.LOST), ("b", Outcome.OK)]
    assert not a_link.delivered and b_link.delivered[0].attempt == 2


async def test_a_non_idempotent_task_whose_agent_never_came_back_is_dead_after_the_grace(
        ) -> None:
    rig = Rig(recovery_grace=1.0)
    try:
        gone, _ = rig.agent("gone", ok)
        rig.registry.disconnected(gone, rig.clock.wall())
        _, other = rig.agent("other", ok)
        task = resumed(rig, gone, instance=None)
        await rig.clock.advance(0.9)
        assert not task.terminal
        await rig.outcome(task, step=0.1)
        assert task.state is S.DEAD and not other.delivered
        assert task.error is not None and task.error["code"] == "unavailable"
        assert "did not come back within 1.0s" in task.error["message"]
        assert "not idempotent" in task.error["message"]
    finally:
        await rig.close()


# ---------------------------------------------------------------- the internal-error guard


async def test_an_exception_inside_the_driver_ends_the_task_with_a_clear_error(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig.agent("a", ok)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("routing bug")

    monkeypatch.setattr(Router, "pick", broken)
    admission = rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
    task = admission.task
    assert task is not None
    waiter = rig.gateway.outcome(task.task_id)
    assert waiter is not None
    await rig.clock.settle()
    assert task.state is S.DEAD and task.error is not None
    assert task.error["message"] == "internal error: RuntimeError('routing bug')"
    assert waiter.done() and waiter.result() is task  # the caller is answered, nothing hangs
    assert task.task_id not in rig.gateway.live and task.task_id in rig.gateway.dead
    assert len(rig.gateway._drivers) == 0 and rig.clock.pending() == 0


async def test_an_exception_after_the_task_ended_leaves_its_outcome_alone(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    rig.agent("a", fault)  # not idempotent: the driver dead-letters it itself

    def update(task: Any) -> None:
        if task.terminal:
            raise OSError("disk full")

    monkeypatch.setattr(rig.store, "update", update)
    admission = rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
    task = admission.task
    assert task is not None
    waiter = rig.gateway.outcome(task.task_id)
    assert waiter is not None
    await rig.clock.settle()
    # The answer left before the failing write; the guard does not overwrite it.
    assert task.state is S.DEAD and task.error is not None
    assert task.error["code"] == "task_failed" and task.error["message"] == "boom"
    assert waiter.done() and waiter.result() is task
    assert len(rig.gateway._drivers) == 0


async def test_an_answer_the_gateway_failed_to_take_is_finished_by_the_driver(
        rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    rig.agent("a", ok)

    def broken(task: Any, result: Any) -> None:
        raise RuntimeError("bookkeeping bug")

    monkeypatch.setattr(rig.gateway.dispatch.book, "answered", broken)
    with caplog.at_level(logging.ERROR, logger="reach.dispatch"):
        task = await rig.submit(params={"n": 7})
    assert task.state is S.SUCCEEDED and task.result == {"echo": {"n": 7}}
    assert outcomes(task) == [("a", Outcome.OK)]
    assert any("its driver finishes it" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- steps of the policy


async def test_a_charged_retry_when_no_agent_is_free_obeys_the_retry_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Today's policy never charges a retry that sent nothing; the driver still honours the
    # budget if it does (the policy decides, the driver applies).
    rig = Rig(retry_budget=0.0, retry_budget_min=0)
    try:
        _, link = rig.agent("a", ok)

        def nobody(*args: Any, **kwargs: Any) -> Any:
            raise Unavailable("no healthy agent can take 'x.work' now")

        monkeypatch.setattr(Router, "pick", nobody)
        monkeypatch.setattr(policy, "when_unavailable",
                            lambda *a, **k: policy.Retry(charge=True, anywhere=True))
        task = await rig.outcome(await rig.submit(call=True))
        assert task.state is S.DEAD and task.error is not None
        assert task.error["code"] == "unavailable" and not link.delivered
        assert "retry budget" in task.error["message"]
        assert "last failure: no healthy agent" in task.error["message"]
    finally:
        await rig.close()


async def test_a_newcomer_of_a_busy_caller_queues_behind_a_lighter_callers_waiter() -> None:
    rig = Rig(queue_wait=5.0)
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        heavy1 = await rig.submit()  # "tester" holds the only slot
        light = (await rig.gateway.submit(SubmitRequest("x.work", {}, "light")))[0]
        await rig.clock.settle()
        heavy2 = await rig.submit()
        assert heavy1.state is S.RUNNING and light.state is S.QUEUED
        assert heavy2.state is S.QUEUED
        link.finish(heavy1.task_id, "ok", 1)
        await rig.clock.settle()
        assert light.state is S.RUNNING and heavy2.state is S.QUEUED  # the lighter caller first
        link.finish(light.task_id, "ok", 2)
        await rig.clock.settle()
        assert heavy2.state is S.RUNNING
        link.finish(heavy2.task_id, "ok", 3)
        await rig.clock.settle()
        assert [t.state for t in (heavy1, light, heavy2)] == [S.SUCCEEDED] * 3
    finally:
        await rig.close()


async def test_a_faulting_agent_dead_letters_with_its_fault_when_retries_run_out() -> None:
    rig = Rig(max_retries=1)
    try:
        rig.agent("a", fault, idempotent=True)
        task = await rig.outcome(await rig.submit())
        assert task.state is S.DEAD and task.error is not None
        assert task.error["code"] == "task_failed" and task.error["message"] == "boom"
        assert outcomes(task) == [("a", Outcome.FAULT)] * 2 and retries(task) == 1
    finally:
        await rig.close()
