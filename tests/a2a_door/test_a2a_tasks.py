"""A2A tasks are Reach tasks: GetTask reads Reach's store (also after a restart), ListTasks
pages through the caller's own, CancelTask refuses an ended or unknown task, and integer
params survive protobuf's floats."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a_door.conftest import FAST, a2a_client, call, data, send, serve, worked

from reach import Agent, Reach
from reach.server.a2a_tasks import coerce


async def test_get_task_answers_after_a_coordinator_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    async with Reach.start(**FAST, a2a=True, store=store) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, call("math.add", {"a": 40, "b": 2}))
            task_id = event.task.id
    async with Reach.start(**FAST, a2a=True, store=store) as again:
        assert again.a2a_url is not None
        async with a2a_client(again.a2a_url) as client:
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert task.id == task_id
            assert task.status.state == pb.TASK_STATE_COMPLETED
            assert data(task.artifacts[0].parts[0]) == {"sum": 42.0}
            assert data(task.history[0].parts[0]) == {"capability": "math.add",
                                                       "params": {"a": 40.0, "b": 2.0}}
            with pytest.raises(TaskNotFoundError):
                await client.get_task(pb.GetTaskRequest(id="no-such-task"))
            listed = await client.list_tasks(pb.ListTasksRequest())
            assert [t.id for t in listed.tasks] == [task_id] and listed.total_size == 1


async def test_list_tasks_pages_through_the_callers_own_tasks() -> None:
    async with Reach.start(**FAST, a2a=True, tokens={"tok-a": "alice", "tok-b": "bob",
                                                     "tok-w": "worker"}) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url, "tok-a") as alice, \
                    a2a_client(reach.a2a_url, "tok-b") as bob:
                sent = []
                for i in range(3):
                    [event] = await send(alice, call("math.add", {"a": i, "b": 1}))
                    sent.append(event.task)
                [failed] = await send(alice, call("orders.cancel", {"order": "o-1"}))
                await send(bob, call("echo.run", {}))
                first = await alice.list_tasks(pb.ListTasksRequest(page_size=3))
                assert first.total_size == 4 and first.page_size == 3
                assert [t.id for t in first.tasks] == [failed.task.id] + [
                    t.id for t in reversed(sent)][:2]
                assert first.next_page_token
                rest = await alice.list_tasks(pb.ListTasksRequest(
                    page_size=3, page_token=first.next_page_token))
                assert [t.id for t in rest.tasks] == [sent[0].id] and not rest.next_page_token
                done = await alice.list_tasks(pb.ListTasksRequest(
                    status=pb.TASK_STATE_FAILED))
                assert [t.id for t in done.tasks] == [failed.task.id]
                one = await alice.list_tasks(pb.ListTasksRequest(
                    context_id=sent[1].context_id, include_artifacts=True))
                assert [t.id for t in one.tasks] == [sent[1].id]
                assert data(one.tasks[0].artifacts[0].parts[0]) == {"sum": 2.0}
                assert (await bob.list_tasks(pb.ListTasksRequest())).total_size == 1
                none = await alice.list_tasks(pb.ListTasksRequest(
                    status=pb.TASK_STATE_INPUT_REQUIRED))
                assert not none.tasks
                with pytest.raises(InvalidParamsError):
                    await alice.list_tasks(pb.ListTasksRequest(page_token="not-a-token"))
        finally:
            await agent.close(drain=0.2)


async def test_cancel_of_an_ended_or_unknown_task_is_refused() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, call("echo.run", {}))
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(pb.CancelTaskRequest(id=event.task.id))
            with pytest.raises(TaskNotFoundError):
                await client.cancel_task(pb.CancelTaskRequest(id="no-such-task"))


def test_integral_floats_become_ints_where_the_schema_says_integer() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "s": {"type": "string"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "many": {"type": "array", "items": {"type": "integer"}},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}]},
            "item": {"$ref": "#/$defs/Item"},
            "either": {"type": ["integer", "string"]},
        },
        "additionalProperties": {"type": "integer"},
        "$defs": {"Item": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
    }
    got = coerce({"n": 3.0, "x": 3.0, "s": "3", "maybe": 4.0, "many": [1.0, 2.5],
                  "pair": [1.0, 2.0], "item": {"qty": 7.0}, "either": 5.0, "other": 6.0,
                  "frac": 1.5}, schema)
    assert got == {"n": 3, "x": 3.0, "s": "3", "maybe": 4, "many": [1, 2.5],
                   "pair": [1, 2.0], "item": {"qty": 7}, "either": 5, "other": 6,
                   "frac": 1.5}
    assert isinstance(got["n"], int) and isinstance(got["x"], float)
    assert isinstance(got["pair"][1], float) and isinstance(got["item"]["qty"], int)
    assert coerce(2.0, {}) == 2.0 and isinstance(coerce(2.0, {}), float)
    assert coerce([1.0], None) == [1.0]


async def test_what_the_door_does_not_do_is_said_plainly() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url) as client:
                [event] = await send(client, call("echo.run", {}))
                task_id = event.task.id
                bare = await client.get_task(pb.GetTaskRequest(id=task_id, history_length=0))
                assert not bare.history and bare.artifacts
                follow_up = call("echo.run", {})
                follow_up.message.task_id = task_id  # a second message to a Reach task
                with pytest.raises(UnsupportedOperationError):
                    await send(client, follow_up)
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.get(reach.a2a_url)).status_code == 405
                assert (await http.get(reach.a2a_url + "/elsewhere")).status_code == 404
        finally:
            await agent.close(drain=0.2)


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_call_cut_by_a_stop_names_its_task_which_resumes(tmp_path: Path,
                                                                 streaming: bool) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    reach = await Reach.start(**FAST, a2a=True, store=store)
    agent = Agent("stuck", reconnect_base=0.02)
    never, started = asyncio.Event(), asyncio.Event()

    @agent.capability("stuck.read")
    async def stuck() -> None:
        started.set()
        await never.wait()
    await agent.connect(reach.url)
    assert reach.a2a_url is not None
    try:
        async with a2a_client(reach.a2a_url, streaming=streaming) as client:
            calling = asyncio.create_task(send(client, call("stuck.read", {})))
            await asyncio.wait_for(started.wait(), 5)
            await reach.stop()
            with pytest.raises(InternalError) as cut:
                await asyncio.wait_for(calling, 5)
        assert cut.value.data is not None and cut.value.data["code"] == "unavailable"
        task_id = cut.value.data["task_id"]
    finally:
        never.set()
        await agent.close(drain=0.1)
        await reach.stop()
    async with Reach.start(**FAST, a2a=True, store=store) as again:
        assert again.a2a_url is not None
        async with a2a_client(again.a2a_url) as client:
            task = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
