"""SendStreamingMessage and SubscribeToTask through the official A2A client: the task, each
chunk as an artifact update, the result artifact, the terminal status."""

from __future__ import annotations

import asyncio
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a_door.conftest import FAST, a2a_client, call, data, send, worked

from reach import Agent, Reach


def kinds(events: list[pb.StreamResponse]) -> list[str]:
    return [str(e.WhichOneof("payload")) for e in events]


async def test_streamed_chunks_arrive_as_artifact_updates() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        async with worked(reach, streaming=True) as client:
            events = await send(client, call("words.stream", {"n": 3}))
    assert kinds(events) == ["task", "artifact_update", "artifact_update", "artifact_update",
                             "artifact_update", "status_update"]
    task_id = events[0].task.id
    chunks = [e.artifact_update for e in events[1:4]]
    assert [data(c.artifact.parts[0]) for c in chunks] == [{"i": 0.0}, {"i": 1.0}, {"i": 2.0}]
    assert [c.append for c in chunks] == [False, True, True]
    assert {c.task_id for c in chunks} == {task_id} and chunks[0].artifact.name == "chunks"
    result = events[4].artifact_update
    assert result.artifact.name == "result" and result.last_chunk
    assert data(result.artifact.parts[0]) == [{"i": 0.0}, {"i": 1.0}, {"i": 2.0}]
    assert events[5].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_a_failed_task_streams_its_failure() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        async with worked(reach, streaming=True) as client:
            events = await send(client, call("orders.cancel", {"order": "o-1"}))
    assert kinds(events) == ["task", "status_update"]
    status = events[1].status_update.status
    assert status.state == pb.TASK_STATE_FAILED
    assert status.message.parts[0].text == "no such order 'o-1'"


async def test_subscribing_to_a_running_task_follows_it_to_its_end() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        agent = Agent("slow", reconnect_base=0.02)
        go = asyncio.Event()

        @agent.capability("slow.count")
        async def count() -> Any:
            yield {"i": 0}
            await go.wait()
            yield {"i": 1}
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url, streaming=True) as client:
                request = call("slow.count", {})
                request.configuration.return_immediately = True
                async with a2a_client(reach.a2a_url, streaming=False) as once:
                    [accepted] = await send(once, request)
                task_id = accepted.task.id
                seen: list[pb.StreamResponse] = []
                async with asyncio.timeout(5):
                    async for event in client.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                        seen.append(event)
                        if len(seen) == 1:
                            go.set()
        finally:
            await agent.close(drain=0.2)
    assert kinds(seen)[0] == "task" and kinds(seen)[-1] == "status_update"
    assert seen[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert {"i": 1.0} in [data(e.artifact_update.artifact.parts[0]) for e in seen
                          if e.WhichOneof("payload") == "artifact_update"]
