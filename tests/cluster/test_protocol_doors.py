"""The MCP and A2A doors of a cluster (docs/cluster.md): every node serves both, over one
PostgreSQL. An A2A task sent to one node is read, followed and listed on another for the
same caller (and no other); an MCP client of one node sees the tool list change when an agent
connects to another node, and calls the new tool through its own node; a push config moves
with its task to the node that takes it over, and any node lists and replays the cluster's
push dead letters (once). Seen through the official ``a2a`` and ``mcp`` clients, pushes
through a real receiver on loopback."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError
from a2a_door.conftest import a2a_client, accepted, call, data, send
from a2a_door.test_a2a_push import pushed, receiving
from mcp_door.conftest import mcp_client, serve
from test_cluster_pg import cut_off, until

from reach import Admin, Agent, Reach

pytestmark = pytest.mark.timeout(60)

LEASE = 1.0  # as test_cluster_pg's: short for a test, long enough for a loaded machine
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-w": "worker", "tok-s": "slow"}
# Agents beat every 50 ms; suspected after 4 silent beats, offline after 6 (test_cluster_pg).
OPTIONS: dict[str, Any] = dict(heartbeat_interval=0.05, suspect_after=4.0, offline_after=6.0,
                               ack_timeout=1.0, drain_timeout=0.5, http_port=0, mcp=True,
                               a2a=True, tokens=TOKENS, lease_s=LEASE, admin_token="t")


async def node(stack: AsyncExitStack, url: str, name: str, **kw: Any) -> Reach:
    return await stack.enter_async_context(Reach.start(
        store=url, cluster=True, node_id=name, **{**OPTIONS, **kw}))


def slow(gate: asyncio.Event, runs: list[int] | None = None) -> Agent:
    """The agent whose ``slow.read`` holds each call until ``gate`` is set (noting each run in
    ``runs``), so a task stays running on the node its agent is connected to."""
    agent = Agent("slow", token="tok-s", heartbeat_interval=0.05, reconnect_base=0.02)

    @agent.capability("slow.read", idempotent=True, latency_ms=5000)
    async def read() -> dict[str, bool]:
        if runs is not None:
            runs.append(1)
        await gate.wait()
        return {"done": True}

    return agent


def sees(reach: Reach, agent: str) -> bool:
    return any(v["name"] == agent and v["state"] == "online" for v in reach.agents())


async def test_an_a2a_task_sent_to_one_node_is_read_followed_and_listed_on_another(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    assert a.a2a_url is not None and b.a2a_url is not None
    gate = asyncio.Event()
    agent = slow(gate)
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


async def test_a_taken_over_tasks_push_is_sent_by_the_node_that_took_it_over(
        pg_url: str, stack: AsyncExitStack) -> None:
    """A push config made on node B for a task B runs moves with the task when B is cut off
    and node A takes it over: A sends the final state, B (still up, fenced) sends nothing."""
    a = await node(stack, pg_url, "node-a", a2a_push_private=True)
    b = await node(stack, pg_url, "node-b", a2a_push_private=True)
    assert a.a2a is not None and b.a2a is not None and b.a2a_url is not None
    gate, runs = asyncio.Event(), []
    agent = slow(gate, runs)
    await stack.enter_async_context(agent.connect([b.url, a.url]))  # moves to A when B goes
    await until(lambda: sees(b, "slow"))
    receiver = await stack.enter_async_context(receiving([]))
    client = await stack.enter_async_context(a2a_client(b.a2a_url, "tok-alice"))
    request = pushed(call("slow.read", {}), receiver.url, "tok-push")
    request.configuration.return_immediately = True
    [event] = await send(client, request)
    task_id = event.task.id
    await until(lambda: runs == [1])
    assert a.a2a_url is not None  # the config made on B is seen from A too
    on_a = await stack.enter_async_context(a2a_client(a.a2a_url, "tok-alice"))
    [config] = (await on_a.list_task_push_notification_configs(
        pb.ListTaskPushNotificationConfigsRequest(task_id=task_id))).configs
    assert config.url == receiver.url
    assert (await on_a.get_task_push_notification_config(pb.GetTaskPushNotificationConfigRequest(
        task_id=task_id, id=config.id))).token == "tok-push"
    cut_off(b)
    await until(lambda: b.cluster is not None and b.cluster.fenced, 5)
    await until(lambda: a.cluster is not None and a.cluster.taken_over == 1)
    gate.set()
    await asyncio.wait_for(receiver.arrived.wait(), 10)
    [(headers, body)] = receiver.got
    assert headers["X-A2A-Notification-Token"] == "tok-push"
    assert body["task"]["id"] == task_id
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Node B follows the task in the store and sees it end too, but the config is A's now.
    await until(lambda: task_id not in b.a2a.pusher.configs)
    await asyncio.wait_for(b.a2a.pusher.settled(), 5)
    assert (a.a2a.pusher.delivered, b.a2a.pusher.delivered) == (1, 0)
    assert receiver.tries == 1


async def test_every_node_lists_the_clusters_push_dead_letters_and_one_replays_each_once(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a", a2a_push_private=True)
    b = await node(stack, pg_url, "node-b", a2a_push_private=True)
    assert a.a2a is not None and b.a2a is not None and a.a2a_url is not None
    await stack.enter_async_context(serve(Agent(
        "worker", token="tok-w", heartbeat_interval=0.05, reconnect_base=0.02)).connect(a.url))
    await until(lambda: sees(a, "worker"))
    receiver = await stack.enter_async_context(receiving([404]))  # not retried: dead at once
    client = await stack.enter_async_context(a2a_client(a.a2a_url, "tok-alice"))
    [event] = await send(client, call("echo.run", {}))
    task_id = event.task.id
    await client.create_task_push_notification_config(
        pb.TaskPushNotificationConfig(task_id=task_id, url=receiver.url))
    await asyncio.wait_for(a.a2a.pusher.settled(), 5)
    admin_a = await stack.enter_async_context(Admin.connect(a.url, token="t"))
    admin_b = await stack.enter_async_context(Admin.connect(b.url, token="t"))
    on_a = await admin_a.push_dead_letters()
    assert [(d["task_id"], d["reason"], d["node"]) for d in on_a] == [
        (task_id, "HTTP 404", "node-a")]
    # Node B lists node A's letter (its task as the store has it: once A's group commit of
    # the task's end has landed, a few milliseconds after the push was tried).
    async with asyncio.timeout(5):
        while await admin_b.push_dead_letters() != on_a:
            await asyncio.sleep(0.01)

    assert await admin_b.replay_pushes() == []  # replaying "all" leaves A's letters alone
    assert await admin_b.replay_pushes(task_id) == [task_id]  # claimed by B, sent from B
    await asyncio.wait_for(receiver.arrived.wait(), 5)
    await asyncio.wait_for(b.a2a.pusher.settled(), 5)
    assert receiver.got[0][1]["task"]["id"] == task_id and receiver.tries == 2
    assert await admin_a.replay_pushes(task_id) == []  # replayed once: nothing left to claim
    assert await admin_a.push_dead_letters() == [] == await admin_b.push_dead_letters()
    assert (a.a2a.pusher.delivered, b.a2a.pusher.delivered) == (0, 1)


async def test_a_config_made_on_a_node_that_leaves_is_sent_by_one_that_stays(
        pg_url: str, stack: AsyncExitStack) -> None:
    """A config is sent by the node it was made on, following the task another node runs;
    when that node leaves (or dies), a survivor takes its configs with its other work."""
    a = await node(stack, pg_url, "node-a", a2a_push_private=True)
    b = await Reach.start(store=pg_url, cluster=True, node_id="node-b",
                          **{**OPTIONS, "a2a_push_private": True})
    assert a.a2a is not None and a.a2a_url is not None and b.a2a_url is not None
    gate = asyncio.Event()
    agent = slow(gate)
    await stack.enter_async_context(agent.connect(a.url))
    await until(lambda: sees(a, "slow"))
    receiver = await stack.enter_async_context(receiving([]))
    task = await accepted(await stack.enter_async_context(a2a_client(a.a2a_url, "tok-alice")),
                          "slow.read")  # run by node A
    try:
        async with a2a_client(b.a2a_url, "tok-alice") as on_b:  # the config, made on B
            await on_b.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, url=receiver.url))
        # (node A has seen B join: it sees B leave at its next round)
        await until(lambda: a.cluster is not None and a.cluster.view()["peers"] == ["node-b"])
    finally:
        await b.stop()
    gate.set()
    await asyncio.wait_for(receiver.arrived.wait(), 5)
    [(_, body)] = receiver.got
    assert body["task"]["id"] == task.id
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert a.a2a.pusher.delivered == 1
