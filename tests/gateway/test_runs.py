"""A task's life carried out by callbacks (reach.gateway.runs), on a real ``Gateway`` with
fake ports: the common path creates no ``asyncio.Task``, nor does a wait for a slot, for
agents or a backoff; a hedged attempt is handed to a coroutine and ends the same way; a stop
drains or cancels either kind, and counts both in ``in_flight``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_decisions import Rig, fault, ok, outcomes, resumed

from reach.core.resilience import LatencyWindow
from reach.core.tasks import Outcome, SubmitRequest, TaskState
from reach.ports import Work

S = TaskState


@contextmanager
def tasks_created() -> Iterator[list[str]]:
    """The names of the asyncio tasks created inside the block."""
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[Any]] = []
    names: list[str] = []
    before = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        tasks.append(task)
        return task

    loop.set_task_factory(factory)
    try:
        yield names
    finally:
        loop.set_task_factory(before)
        names.extend(task.get_name() for task in tasks)  # (named once created)


async def test_a_call_to_a_free_agent_creates_no_asyncio_task() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        with tasks_created() as created:
            task = await rig.submit(params={"n": 1})
        assert task.state is S.SUCCEEDED and task.result == {"echo": {"n": 1}}
        assert [name for name in created if name.startswith("task-")] == []
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_retry_s_backoff_holds_no_coroutine_and_the_task_ends() -> None:
    rig = Rig()
    try:
        calls: list[int] = []

        def flaky(work: Work) -> Any:
            calls.append(work.attempt)
            return fault(work) if len(calls) == 1 else ok(work)

        rig.agent("a", flaky, idempotent=True)
        with tasks_created() as created:
            task = await rig.submit()
            assert task.state is S.RETRYING and rig.gateway.in_flight == 1
            await rig.outcome(task)
            await rig.clock.settle()
        assert task.state is S.SUCCEEDED
        assert outcomes(task) == [("a", Outcome.FAULT), ("a", Outcome.OK)]
        assert [name for name in created if name.startswith("task-")] == []
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_task_waiting_for_its_agent_holds_no_coroutine_and_goes_on_when_it_is_back(
) -> None:
    rig = Rig(recovery_grace=30.0)
    try:
        a, _ = rig.agent("a", ok)
        rig.registry.disconnected(a, rig.clock.wall())
        with tasks_created() as created:
            task = resumed(rig, a, instance=None)
            await rig.clock.advance(5.0)
            assert not task.terminal and rig.gateway.in_flight == 1
            rig.agent("a", ok)  # it reconnects: the wait ends now, not at the grace's end
            await rig.clock.settle()
        assert task.state is S.SUCCEEDED and outcomes(task)[-1] == ("a", Outcome.OK)
        assert [name for name in created if name.startswith("task-")] == []
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_stop_during_a_backoff_leaves_the_task_unfinished_and_nothing_armed() -> None:
    rig = Rig()
    rig.agent("a", fault, idempotent=True)
    task = await rig.submit()
    assert task.state is S.RETRYING and rig.gateway.in_flight == 1
    await rig.gateway.stop(drain=0)
    assert rig.gateway.in_flight == 0
    await rig.clock.advance(60)  # the backoff's end finds nothing to do
    assert task.state is S.RETRYING and len(task.attempts) == 1


async def test_a_task_waiting_for_a_slot_holds_no_coroutine_and_is_served_when_one_frees(
) -> None:
    rig = Rig(queue_wait=5.0)
    try:
        _, link = rig.agent("a", None, max_concurrency=1)  # acknowledged, answered by hand
        with tasks_created() as created:
            first = await rig.submit()
            second = await rig.submit()
            assert second.state is S.QUEUED and rig.gateway.in_flight == 2
            assert rig.gateway.slots.waiting("x.work") == 1
            link.finish(first.task_id, "ok", 1)
            await rig.clock.settle()
            assert first.state is S.SUCCEEDED and second.state is S.RUNNING
            link.finish(second.task_id, "ok", 2)
            await rig.outcome(second)
            await rig.clock.settle()  # (the answer leaves first; the run's bookkeeping next)
        assert (second.state, second.result) == (S.SUCCEEDED, 2)
        assert [name for name in created if name.startswith("task-")] == []
        assert rig.gateway.in_flight == 0 and rig.gateway.slots.waiting("x.work") == 0
    finally:
        await rig.close()


async def test_a_queued_call_whose_wait_runs_out_is_rejected_and_leaves_the_queue() -> None:
    rig = Rig(queue_wait=0.5)
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        with tasks_created() as created:
            first = await rig.submit()
            second = await rig.submit(call=True)
            assert second.state is S.QUEUED
            await rig.clock.advance(0.5)
        assert second.state is S.FAILED and second.error is not None
        assert second.error["code"] == "rejected"
        assert "max_concurrency" in second.error["message"]
        assert [name for name in created if name.startswith("task-")] == []
        assert rig.gateway.slots.waiting("x.work") == 0
        assert not rig.gateway.slots.yields_to("x.work", "other", lambda caller: 0)
        link.finish(first.task_id, "ok", 1)
        await rig.clock.settle()
        assert first.state is S.SUCCEEDED and rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_stop_while_a_task_waits_for_a_slot_leaves_it_unfinished_and_out_of_the_queue(
) -> None:
    rig = Rig(queue_wait=5.0)
    _, link = rig.agent("a", None, max_concurrency=1)
    await rig.submit()
    second = await rig.submit()
    assert second.state is S.QUEUED and rig.gateway.in_flight == 2
    await rig.gateway.stop(drain=0)
    assert second.state is S.QUEUED  # resumed after a restart
    assert rig.gateway.in_flight == 0 and rig.gateway.slots.waiting("x.work") == 0
    await rig.clock.advance(10)  # its wait's end finds nothing to do
    assert second.state is S.QUEUED and second.attempts == []


async def test_a_hedged_read_is_handed_to_a_coroutine_and_the_first_answer_wins() -> None:
    rig = Rig()
    try:
        rig.agent("a", lambda work: "hang", idempotent=True, hedge=True, weight=1000)
        for _ in range(20):  # the capability's P95: 0.2 s
            rig.gateway.dispatch.latency.setdefault("x.work", LatencyWindow()).add(0.2)
        _, b_link = rig.agent("b", ok, idempotent=True, hedge=True, weight=1)
        with tasks_created() as created:
            task = await rig.submit()
            await rig.clock.advance(0.2)
        assert task.state is S.SUCCEEDED
        assert outcomes(task) == [("a", Outcome.CANCELLED), ("b", Outcome.OK)]
        assert created.count(f"task-{task.task_id}") == 1
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_stop_drains_a_call_in_flight_on_the_common_path() -> None:
    rig = Rig()
    _, link = rig.agent("a", None)
    task = await rig.submit()
    assert task.state is S.RUNNING and rig.gateway.in_flight == 1

    async def answer_soon() -> None:
        await asyncio.sleep(0.01)
        link.finish(task.task_id, "ok", "done")

    answering = asyncio.get_running_loop().create_task(answer_soon())
    await rig.gateway.stop(drain=5.0)
    await answering
    assert (task.state, task.result) == (S.SUCCEEDED, "done")
    assert rig.gateway.in_flight == 0


async def test_a_stop_without_drain_abandons_the_attempt_and_leaves_the_task_unfinished(
) -> None:
    rig = Rig()
    record, link = rig.agent("a", None)
    task = await rig.submit()
    assert record.inflight == 1
    await rig.gateway.stop(drain=0)
    assert task.state is S.RUNNING  # resumed after a restart
    assert [a.outcome for a in task.attempts] == [Outcome.RUNNING]
    # forgotten, not stopped at the agent: it goes back there after the restart, and the
    # agent's key cache answers it (a stopped run would be forgotten and run again)
    assert record.inflight == 0 and link.cancelled == [] and not link.pending
    assert rig.gateway.in_flight == 0


async def test_a_task_let_go_on_the_common_path_stops_being_driven_here() -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", None)
        task = await rig.submit()
        assert rig.gateway.following.let_go([task.task_id]) == 1
        assert rig.gateway.in_flight == 0 and record.inflight == 0
        assert link.cancelled == [] and not link.pending  # (its new owner sends it back)
        assert task.state is S.RUNNING  # another node owns it now: nothing written here
    finally:
        await rig.close()


async def test_a_submit_the_store_refuses_is_not_driven() -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", ok)
        rig.store.fail_next = True
        with pytest.raises(OSError, match="disk full"):
            await rig.gateway.submit(SubmitRequest("x.work", {}, "tester"))
        await rig.clock.settle()
        assert link.delivered == [] and record.inflight == 0
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_a_link_that_raises_ends_the_task_as_an_internal_error_and_frees_its_slot(
) -> None:
    rig = Rig()
    try:
        def broken(work: Work) -> Any:
            raise RuntimeError("a bug in the link")

        record, _ = rig.agent("a", broken)
        task = await rig.submit()
        assert task.state is S.DEAD
        assert task.error is not None and "internal error" in task.error["message"]
        assert "a bug in the link" in task.error["message"]
        assert record.inflight == 0 and rig.gateway.in_flight == 0
    finally:
        await rig.close()
