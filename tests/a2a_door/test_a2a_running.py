"""A2A methods on a task that is still running, and on one that has ended: CancelTask on a
running task cancels it (issue 27): it ends CANCELED and its handler is stopped; CancelTask
on an ended task says it cannot be; SubscribeToTask on an ended task gives the task and
ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError
from a2a_door.conftest import FAST, a2a_client, accepted, call, send, slow

from reach import Reach


@asynccontextmanager
async def slow_door(go: asyncio.Event) -> AsyncIterator[Reach]:
    async with Reach.start(**FAST, a2a=True) as reach:
        agent = slow(go)
        await agent.connect(reach.url)
        try:
            yield reach
        finally:
            go.set()
            await agent.close(drain=0.2)


async def test_cancel_of_a_running_task_cancels_it_and_of_an_ended_one_cannot() -> None:
    go = asyncio.Event()
    async with slow_door(go) as reach:
        assert reach.a2a_url is not None
        async with a2a_client(reach.a2a_url) as client:
            task = await accepted(client, "slow.read")
            task_id = task.id
            assert task.status.state in (pb.TASK_STATE_WORKING, pb.TASK_STATE_SUBMITTED)
            cancelled = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
            assert cancelled.id == task_id and cancelled.status.state == pb.TASK_STATE_CANCELED
            assert "cancelled by" in cancelled.status.message.parts[0].text
            got = await client.get_task(pb.GetTaskRequest(id=task_id))
            assert got.status.state == pb.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError, match="has ended"):
                await client.cancel_task(pb.CancelTaskRequest(id=task_id))


async def test_subscribing_to_an_ended_task_gives_the_task_and_ends() -> None:
    go = asyncio.Event()
    go.set()
    async with slow_door(go) as reach:
        assert reach.a2a_url is not None
        async with a2a_client(reach.a2a_url) as client:
            [event] = await send(client, call("slow.read", {}))
        assert event.task.status.state == pb.TASK_STATE_COMPLETED
        async with a2a_client(reach.a2a_url, streaming=True) as client:
            async with asyncio.timeout(5):
                seen = [e async for e in client.subscribe(
                    pb.SubscribeToTaskRequest(id=event.task.id))]
        assert seen and seen[0].task.id == event.task.id
        assert seen[0].task.status.state == pb.TASK_STATE_COMPLETED
