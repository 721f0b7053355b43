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
from reach.errors import InvalidParams, NoRoute, ReachError, Rejected, Unauthorized, Unavailable

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


async def test_a_late_ack_of_the_first_copy_leaves_the_running_task_as_it_is(rig: Rig) -> None:
    _, a_link = rig.agent("a", lambda w: "silent", idempotent=True, hedge=True, weight=1000)
    _, b_link = rig.agent("b", None, idempotent=True, hedge=True, weight=1)
    with_p95(rig)
    task = await rig.submit()
    assert task.state is S.DISPATCHED  # "a" has not acknowledged
    await rig.clock.advance(0.2)  # the hedge goes to "b", which acknowledges at once
    assert task.state is S.RUNNING
    acks = sum(1 for _, _, note in task.history if note == "acknowledged")
    a_link.pending[(task.task_id, 1)].ack()  # "a" acknowledges late, within its ack timeout
    assert task.state is S.RUNNING
    assert sum(1 for _, _, note in task.history if note == "acknowledged") == acks
    a_link.finish(task.task_id, "ok", "from a")
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED and task.result == "from a"


# ---------------------------------------------------------------- refusals at accept


async def test_accept_refuses_while_stopping_and_names_that_cannot_be_capabilities() -> None:
    rig = Rig()
    rig.agent("a", ok)
    with pytest.raises(InvalidParams, match="has no words"):
        rig.gateway.accept(SubmitRequest("...", {}, "tester"))
    await rig.close()
    with pytest.raises(Unavailable, match="shutting down"):
        rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))


async def test_accept_refuses_a_call_whose_agents_are_all_away(rig: Rig) -> None:
    a, _ = rig.agent("a", ok)
    rig.gateway.known["x.work"] = {"a"}
    rig.registry.disconnected(a, rig.clock.wall())
    with pytest.raises(Unavailable, match=r"1 agent\(s\) declare .x.work. but none can take "
                                          r"it now: a disconnected; retry shortly"):
        rig.gateway.accept(SubmitRequest("x.work", {}, "tester", call=True))


async def test_accept_refuses_a_call_to_a_known_capability_nobody_declares_now(rig: Rig
                                                                              ) -> None:
    rig.agent("a", ok)
    rig.gateway.known["y.work"] = {"gone-agent"}
    with pytest.raises(Unavailable, match=r"declared by \['gone-agent'\], not connected now"):
        rig.gateway.accept(SubmitRequest("y.work", {}, "tester", call=True))


async def test_a_caller_at_its_task_limit_is_rejected() -> None:
    rig = Rig(max_caller_tasks=1)
    try:
        rig.agent("a", lambda w: "hang")
        first = await rig.submit()
        with pytest.raises(Rejected, match="max_caller_tasks"):
            rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
        other = rig.gateway.accept(SubmitRequest("x.work", {}, "someone-else"))
        assert first.state is S.RUNNING and other.task is not None
    finally:
        await rig.close()


async def test_a_duplicate_submit_with_a_stream_sink_joins_the_live_first_task(rig: Rig) -> None:
    _, link = rig.agent("a", None)
    got: list[tuple[str, int, Any]] = []
    first = rig.gateway.accept(SubmitRequest("x.work", {}, "tester", idempotency_key="k"))
    again = rig.gateway.accept(SubmitRequest("x.work", {}, "tester", idempotency_key="k"),
                               lambda *chunk: got.append(chunk))
    # (MemoryStore commits at once: nothing left to wait for before acknowledging)
    assert again.duplicate and again.task is first.task and again.commit is None
    await rig.clock.settle()
    assert first.task is not None
    tid = first.task.task_id
    link.pending[(tid, 1)].chunk(0, "part")
    rig.gateway.add_chunk_sink(tid, lambda *chunk: got.append(("direct", *chunk[1:])))
    link.pending[(tid, 1)].chunk(1, "more")
    assert got == [(tid, 0, "part"), (tid, 1, "more"), ("direct", 1, "more")]
    seen: list[str] = []
    assert rig.gateway.watch(tid, lambda t: seen.append(t.state.value))
    link.finish(tid, "ok", "done")
    await rig.clock.settle()
    assert seen == ["succeeded"]


# ---------------------------------------------------------------- admission's checks


def _task(tid: str, trace: str, caller: str) -> Task:
    env = Envelope(task_id=tid, trace_id=trace, capability="x.work", params={}, caller=caller,
                   idempotency_key=f"{caller}/{tid}", created_at=0.0)
    return new_task(env, 0.0)


async def test_joining_a_trace_its_own_caller_a_nested_call_or_a_forgotten_root() -> None:
    from reach.config import Settings
    from reach.gateway.admission import check_join
    from reach.gateway.book import TaskBook
    from reach.gateway.events import EventBus
    from reach.testing import ManualClock

    book = TaskBook(Settings(), EventBus(ManualClock()))
    root = _task("root", "tr", "planner")
    root.attempts.append(Attempt(1, "id-sales", "sales", 0.0))  # "sales" runs the root task
    book.track(root)
    check_join(book, "tr-new", "anyone", None)  # a trace nobody has yet
    check_join(book, "tr", "planner", None)  # its own caller
    check_join(book, "tr", "sales", "root")  # the agent running the root calls on
    with pytest.raises(Unauthorized, match="belongs to another caller"):
        check_join(book, "tr", "stranger", "root")  # names the task, but does not run it
    with pytest.raises(Unauthorized):
        check_join(book, "tr", "stranger", None)
    book.traces["tr-old"] = ["evicted"]  # its first task is no longer in memory
    check_join(book, "tr-old", "stranger", None)


async def test_an_intent_must_say_something_and_match_a_capability(rig: Rig) -> None:
    from reach.gateway.admission import by_intent
    rig.agent("a", ok)
    with pytest.raises(InvalidParams, match="name a capability or state an intent"):
        by_intent(rig.registry, "   ")
    with pytest.raises(NoRoute, match="no capability matches the intent"):
        by_intent(rig.registry, "bake a cake")
