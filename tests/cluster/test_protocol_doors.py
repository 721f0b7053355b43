"""The MCP and A2A doors of a cluster (docs/cluster.md): every node serves both, over one
PostgreSQL. An A2A task sent to one node is read, followed and listed on another for the
same caller (and no other); an MCP client of one node sees the tool list change when an agent
connects to another node, and calls the new tool through its own node. Seen through the
official ``a2a`` and ``mcp`` clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError
from a2a_door.conftest import a2a_client, accepted, data
from mcp_door.conftest import mcp_client, serve

from reach import Agent, Reach

pytestmark = pytest.mark.timeout(60)

LEASE = 1.0  # as test_cluster_pg's: short for a test, long enough for a loaded machine
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-w": "worker", "tok-s": "slow"}
# Agents beat every 50 ms; suspected after 4 silent beats, offline after 6 (test_cluster_pg).
OPTIONS: dict[str, Any] = dict(heartbeat_interval=0.05, suspect_after=4.0, offline_after=6.0,
                               ack_timeout=1.0, drain_timeout=0.5, http_port=0, mcp=True,
                               a2a=True, tokens=TOKENS, lease_s=LEASE, admin_token="t")


async def until(check: Callable[[], Any], limit: float = 10.0) -> None:
    async with asyncio.timeout(limit):
        while not check():
            await asyncio.sleep(0.01)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def node(stack: AsyncExitStack, url: str, name: str, **kw: Any) -> Reach:
    return await stack.enter_async_context(Reach.start(
        store=url, cluster=True, node_id=name, **{**OPTIONS, **kw}))


def sees(reach: Reach, agent: str) -> bool:
    return any(v["name"] == agent and v["state"] == "online" for v in reach.agents())


async def test_an_a2a_task_sent_to_one_node_is_read_followed_and_listed_on_another(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    assert a.a2a_url is not None and b.a2a_url is not None
    gate = asyncio.Event()
    agent = Agent("slow", token="tok-s", heartbeat_interval=0.05, reconnect_base=0.02)

    @agent.capability("slow.read", idempotent=True, latency_ms=5000)
    async def read() -> dict[str, bool]:
        await gate.wait()
        return {"done": True}

    await stack.enter_async_context(agent.connect(a.url))
    await until(lambda: sees(a, "slow"))
    alice_a = await stack.enter_async_context(a2a_client(a.a2a_url, "tok-alice"))
    task = await accepted(alice_a, "slow.read")  # on node A, held by its agent there
    assert task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)

    alice_b = await stack.enter_async_context(a2a_client(b.a2a_url, "tok-alice",
                                                         streaming=True))
    got = await alice_b.get_task(pb.GetTaskRequest(id=task.id))
    assert got.id == task.id and got.status.state == pb.TASK_STATE_WORKING
    listed = await alice_b.list_tasks(pb.ListTasksRequest())
    assert [t.id for t in listed.tasks] == [task.id]

    bob_b = await stack.enter_async_context(a2a_client(b.a2a_url, "tok-bob"))
    with pytest.raises(TaskNotFoundError):  # another caller's task: not there, on any node
        await bob_b.get_task(pb.GetTaskRequest(id=task.id))
    assert not (await bob_b.list_tasks(pb.ListTasksRequest())).tasks

    events: list[pb.StreamResponse] = []

    async def follow() -> None:
        async for event in alice_b.subscribe(pb.SubscribeToTaskRequest(id=task.id)):
            events.append(event)

    following = asyncio.ensure_future(follow())
    await until(lambda: len(events) >= 1)  # the task as it stands, then its end
    assert events[0].task.id == task.id and not following.done()
    gate.set()
    await asyncio.wait_for(following, 10)
    final = [e.status_update for e in events if e.HasField("status_update")]
    assert final[-1].task_id == task.id
    assert final[-1].status.state == pb.TASK_STATE_COMPLETED
    results = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert data(results[-1].artifact.parts[0]) == {"done": True}
    done = await alice_b.get_task(pb.GetTaskRequest(id=task.id))
    assert done.status.state == pb.TASK_STATE_COMPLETED


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_mcp_client_of_one_node_sees_and_calls_a_tool_of_another_nodes_agent(
        pg_url: str, stack: AsyncExitStack, mode: str) -> None:
    """Both paths of ``tools/list_changed``: a 2025 session's notification, and the 2026
    revision's subscription."""
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    assert b.mcp_url is not None
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if getattr(getattr(message, "root", message), "method", "") == \
                "notifications/tools/list_changed":
            changed.set()

    agent = serve(Agent("worker", token="tok-w", heartbeat_interval=0.05,
                        reconnect_base=0.02))
    # (in the test's own task: the client's task group must end where it began)
    async with mcp_client(b.mcp_url, "tok-alice", mode=mode,
                          message_handler=on_message) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["reach_intent"]
        if mode == "legacy":
            await stack.enter_async_context(agent.connect(a.url))  # to node A, not B
            await asyncio.wait_for(changed.wait(), 10)
        else:
            async with client.listen(tools_list_changed=True) as sub:
                await stack.enter_async_context(agent.connect(a.url))
                async with asyncio.timeout(10):
                    async for _event in sub:
                        break
        await until(lambda: sees(b, "worker"))
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"echo.run", "orders.cancel", "words.stream"} <= tools
        result = await client.call_tool("echo.run", {"a": 1})  # through B, run by A's agent
        assert not result.is_error and result.structured_content == {"echo": {"a": 1}}
    assert [v["node"] for v in b.agents() if v["name"] == "worker"] == ["node-a"]
