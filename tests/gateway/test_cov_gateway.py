"""The gateway's and dispatcher's edges, on the fakes of ``test_decisions``: a duplicate key
whose first task only the store knows, an answer arriving for a task already ended, an agent
that starts draining while its attempt is being committed, and hedges that find nobody, lose
their first copy, or race the first copy's answer."""

from __future__ import annotations

from typing import Any

import pytest
from test_decisions import Rig, ok, outcomes

from reach.core.resilience import LatencyWindow
from reach.core.tasks import Attempt, Envelope, Outcome, SubmitRequest, Task, TaskState, new_task
from reach.errors import ReachError

S = TaskState


@pytest.fixture
async def rig() -> Any:
    r = Rig()
    yield r
    await r.close()


def with_p95(rig: Rig, seconds: float = 0.2) -> None:
    window = rig.gateway.dispatch.latency.setdefault("x.work", LatencyWindow())
    for _ in range(20):
        window.add(seconds)


# ---------------------------------------------------------------- duplicates and answers


async def test_a_duplicate_key_whose_first_task_left_memory_is_read_from_the_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(recent_tasks=1)
    try:
        rig.agent("a", ok)
        first = await rig.submit(idempotency_key="k1")
        await rig.submit()  # pushes the first out of ``recent``
        assert rig.gateway.find(first.task_id) is None
        stored: dict[str, Task] = {first.task_id: first}

        async def get(task_id: str) -> Task | None:
            return stored.get(task_id)

        monkeypatch.setattr(rig.store, "get", get)
        again, duplicate = await rig.gateway.submit(
            SubmitRequest("x.work", {}, "tester", idempotency_key="k1"))
        assert duplicate and again is first
        stored.clear()  # the store lost it too: an error, not a second run
        with pytest.raises(ReachError, match="first task of this idempotency key was not"):
            await rig.gateway.submit(SubmitRequest("x.work", {}, "tester", idempotency_key="k1"))
    finally:
        await rig.close()


async def test_an_answer_for_a_task_already_ended_changes_nothing(rig: Rig) -> None:
    rig.agent("a", ok)
    task = await rig.submit(params={"n": 1})
    assert task.state is S.SUCCEEDED
    rig.gateway.answered(task, {"other": True})
    assert task.result == {"echo": {"n": 1}} and task.state is S.SUCCEEDED


async def test_resume_marks_only_the_interrupted_attempt_lost(rig: Rig) -> None:
    a, _ = rig.agent("a", ok)
    now = rig.clock.wall()
    task = new_task(Envelope(task_id="t", trace_id="tr", capability="x.work", params={},
                             caller="tester", idempotency_key="tester/k", created_at=now), now)
    task.attempts.append(Attempt(1, a.agent_id, "a", now, outcome=Outcome.FAULT, error="boom"))
    task.attempts.append(Attempt(2, a.agent_id, "a", now))  # running when it stopped
    rig.gateway.resume(task)
    assert [(x.outcome, x.error) for x in task.attempts] == [
        (Outcome.FAULT, "boom"), (Outcome.LOST, "coordinator restarted")]
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED and outcomes(task)[-1] == ("a", Outcome.OK)


# ---------------------------------------------------------------- dispatch


async def test_an_agent_draining_while_its_attempt_commits_gets_no_work(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    a, a_link = rig.agent("a", ok, weight=1000)
    _, b_link = rig.agent("b", ok, weight=1)
    persist = rig.store.persist

    def draining_meanwhile(task: Task) -> Any:
        a.draining = True  # it said goodbye while the commit was being written
        return persist(task)

    monkeypatch.setattr(rig.store, "persist", draining_meanwhile)
    task = await rig.submit()
    assert task.state is S.SUCCEEDED and not a_link.delivered and b_link.delivered
    assert outcomes(task) == [("a", Outcome.UNDELIVERED), ("b", Outcome.OK)]
    assert a.inflight == 0 and a_link.cancelled == []  # nothing was sent, nothing to cancel


async def test_a_hedge_with_nobody_else_to_ask_waits_for_the_first_copy(rig: Rig) -> None:
    _, link = rig.agent("a", None, idempotent=True, hedge=True)
    with_p95(rig)
    task = await rig.submit()
    await rig.clock.advance(0.3)  # past the P95: no other agent, so no second copy
    assert len(link.delivered) == 1 and task.state is S.RUNNING
    link.finish(task.task_id, "ok", "first")
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED and task.result == "first"
    assert rig.gateway.metrics.snapshot()["capabilities"]["x.work"].get("retries", 0) == 0


async def test_a_hedge_outlives_a_first_copy_that_faults(rig: Rig) -> None:
    _, a_link = rig.agent("a", None, idempotent=True, hedge=True, weight=1000)
    _, b_link = rig.agent("b", None, idempotent=True, hedge=True, weight=1)
    with_p95(rig)
    task = await rig.submit()
    await rig.clock.advance(0.2)  # the hedge leaves for "b"
    assert len(b_link.delivered) == 1 and task.state is S.RUNNING
    a_link.finish(task.task_id, "fault", "first copy broke")
    await rig.clock.settle()
    assert not task.terminal  # the hedge may still answer
    b_link.finish(task.task_id, "ok", "from b")
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED and task.result == "from b"
    assert outcomes(task) == [("a", Outcome.FAULT), ("b", Outcome.OK)]


async def test_a_second_answer_in_the_same_moment_is_ignored(rig: Rig) -> None:
    _, a_link = rig.agent("a", None, idempotent=True, hedge=True, weight=1000)
    _, b_link = rig.agent("b", None, idempotent=True, hedge=True, weight=1)
    with_p95(rig)
    task = await rig.submit()
    await rig.clock.advance(0.2)
    a_link.finish(task.task_id, "ok", "from a")
    b_link.finish(task.task_id, "ok", "from b")  # before anything else runs
    await rig.clock.settle()
    # The caller has the first answer; both agents did the work, and both attempts say so.
    assert task.state is S.SUCCEEDED and task.result == "from a"
    assert outcomes(task) == [("a", Outcome.OK), ("b", Outcome.OK)]


async def test_a_hedge_is_not_sent_when_the_retry_budget_is_spent() -> None:
    rig = Rig(retry_budget=0.0, retry_budget_min=0)
    try:
        _, a_link = rig.agent("a", None, idempotent=True, hedge=True, weight=1000)
        _, b_link = rig.agent("b", None, idempotent=True, hedge=True, weight=1)
        with_p95(rig)
        task = await rig.submit()
        await rig.clock.advance(0.3)
        assert not b_link.delivered  # a hedge spends the budget like a retry
        a_link.finish(task.task_id, "ok", "a")
        await rig.clock.settle()
        assert task.state is S.SUCCEEDED and outcomes(task) == [("a", Outcome.OK)]
    finally:
        await rig.close()


async def test_both_copies_failing_ends_with_the_last_verdict() -> None:
    rig = Rig(max_retries=0)
    try:
        _, a_link = rig.agent("a", None, idempotent=True, hedge=True, weight=1000)
        _, b_link = rig.agent("b", None, idempotent=True, hedge=True, weight=1)
        with_p95(rig)
        task = await rig.submit()
        await rig.clock.advance(0.2)
        a_link.finish(task.task_id, "fault", "a broke")
        await rig.clock.settle()
        b_link.finish(task.task_id, "fault", "b broke")
        await rig.clock.settle()
        assert task.state is S.DEAD and task.error is not None
        assert task.error["message"] == "b broke"
    finally:
        await rig.close()
