"""Coordinators on one PostgreSQL as one Reach (``cluster=True``, docs/cluster.md): they find
each other through ``reach_nodes``, route to each other's agents, follow each other's tasks,
take over a dead node's tasks and fence themselves when cut off from the database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from reach import Agent, Client, Reach, Unavailable
from reach.errors import InvalidParams

pytestmark = pytest.mark.timeout(60)

# A lease short enough for a test, long enough that a loaded machine's stalled loop does not
# let it run out (a node whose renewal comes late fences itself, then rejoins).
LEASE = 1.0


async def until(check: Callable[[], Any], limit: float = 10.0) -> None:
    async with asyncio.timeout(limit):
        while not check():
            await asyncio.sleep(0.01)


# Agents beat every 50 ms; suspected after 4 silent beats, offline after 6 (Settings' 2 and 3
# took an agent offline when the whole suite stalled the loop 150 ms: "worker offline" at the
# first submit, as reach.testing.Cluster found before).
SLACK = {"suspect_after": 4.0, "offline_after": 6.0}


async def node(stack: AsyncExitStack, url: str, name: str, **kw: Any) -> Reach:
    reach = await stack.enter_async_context(Reach.start(
        store=url, cluster=True, node_id=name, lease_s=LEASE, admin_token="t",
        heartbeat_interval=0.05, http_port=None, **{**SLACK, **kw}))
    return reach


def agent_with(name: str, gate: asyncio.Event | None = None, runs: list[str] | None = None
               ) -> Agent:
    agent = Agent(name, heartbeat_interval=0.05)

    @agent.capability("work.do", idempotent=True, latency_ms=5000)
    async def do(n: int) -> dict[str, Any]:
        if runs is not None:
            runs.append(name)
        if gate is not None:
            await gate.wait()
        return {"n": n, "by": name}

    return agent


async def test_nodes_find_each_other_and_call_across(pg_url: str, stack: AsyncExitStack
                                                     ) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    agent = agent_with("worker-b")
    await stack.enter_async_context(agent.connect(b.url))
    await until(lambda: any(v["name"] == "worker-b" for v in a.agents()))
    seen = {v["name"]: v["node"] for v in a.agents()}
    assert seen["worker-b"] == "node-b"
    client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    assert await client.call("work.do", {"n": 1}, timeout=10) == {"n": 1, "by": "worker-b"}
    assert a.cluster is not None and a.cluster.view()["peers"] == ["node-b"]


async def test_a_caller_on_another_node_waits_for_the_owners_result(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    gate = asyncio.Event()
    await stack.enter_async_context(agent_with("worker", gate).connect(a.url))
    first = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    handle = await first.submit("work.do", {"n": 7}, idempotency_key="k-7")
    # The same caller, on the other node, asks for the task node A drives.
    other = await stack.enter_async_context(Client.connect(b.url, caller="planner"))
    waiting = asyncio.ensure_future(other.result(handle.task_id, timeout=10))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    gate.set()
    assert await waiting == {"n": 7, "by": "worker"}
    assert len(b.gateway.following) == 0


async def test_a_dead_nodes_tasks_are_taken_over_once(pg_url: str, stack: AsyncExitStack
                                                      ) -> None:
    a = await node(stack, pg_url, "node-a")
    b = Reach.start(store=pg_url, cluster=True, node_id="node-b", lease_s=LEASE,
                    admin_token="t", heartbeat_interval=0.05, http_port=None)
    b_reach = await b
    gate = asyncio.Event()
    runs: list[str] = []
    on_b = agent_with("worker-1", gate, runs)
    await on_b.connect([b_reach.url, a.url])  # (on either node: B routes to it both ways)
    await until(lambda: any(v["name"] == "worker-1" and v["state"] == "online"
                            for v in b_reach.agents()))
    caller = await Client.connect(b_reach.url, caller="planner")
    handle = await caller.submit("work.do", {"n": 3}, idempotency_key="k-3")
    await until(lambda: runs == ["worker-1"])
    # Node B dies without leaving: its loops stop, its sockets go, its lease runs out.
    cut_off(b_reach)
    await until(lambda: b_reach.cluster is not None and b_reach.cluster.fenced, 5)
    await until(lambda: a.cluster is not None and a.cluster.taken_over == 1, 10)
    gate.set()
    mover = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    assert await mover.result(handle.task_id, timeout=10) == {"n": 3, "by": "worker-1"}
    assert runs == ["worker-1"]  # the agent's key cache answered the take-over: run once
    await caller.close()
    await on_b.close()
    await b_reach.stop()


def cut_off(reach: Reach) -> None:
    """The node can no longer reach the database: its renewals and rejoins fail."""
    assert reach.cluster is not None
    reach.cluster.nodes.renew = _never  # type: ignore[method-assign]
    reach.cluster.nodes.join = _refused  # type: ignore[method-assign]


async def _never() -> bool:
    return False


async def _refused(*_args: object) -> None:
    raise ConnectionRefusedError("the database is unreachable")


async def test_a_fenced_node_refuses_work_and_sends_it_elsewhere(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    await stack.enter_async_context(agent_with("worker").connect([a.url, b.url]))
    cut_off(b)
    await until(lambda: b.cluster is not None and b.cluster.fenced, 5)
    client = await stack.enter_async_context(Client.connect([b.url, a.url], caller="p"))
    assert client.url == a.url  # the fenced node refused the hello: the caller moved on
    # (an agent that was on B moves to A: A routes to it once it has registered there)
    await until(lambda: any(v["name"] == "worker" and v["state"] == "online" and
                            v["node"] == "node-a" for v in a.agents()))
    assert await client.call("work.do", {"n": 2}, timeout=10) == {"n": 2, "by": "worker"}


async def test_every_node_lists_the_clusters_dead_letters_and_any_node_replays_one(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a", max_retries=0)
    b = await node(stack, pg_url, "node-b", max_retries=0)
    healthy = asyncio.Event()
    agent = Agent("flaky", heartbeat_interval=0.05)

    @agent.capability("work.flaky", idempotent=True, latency_ms=2000)
    async def flaky(n: int) -> dict[str, Any]:
        if not healthy.is_set():
            raise RuntimeError("the database connection dropped")
        return {"n": n}

    await stack.enter_async_context(agent.connect(a.url))
    client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    handle = await client.submit("work.flaky", {"n": 5}, idempotency_key="k-5")
    await until(lambda: [d["task_id"] for d in a.dead_letters()] == [handle.task_id])
    # Node B lists node A's dead letter within a round, and replays it from there.
    await until(lambda: [d["task_id"] for d in b.dead_letters()] == [handle.task_id])
    assert b.replay_many() == []  # a filtered replay leaves another node's letters alone
    healthy.set()
    view = await b.replay(handle.task_id, wait=10)
    assert view["state"] == "succeeded"
    assert await client.result(handle.task_id, timeout=10) == {"n": 5}
    # Node A still lists it until its next round, but cannot replay it twice.
    assert a.cluster is not None and not await a.cluster.claim(handle.task_id)
    with pytest.raises(InvalidParams, match="dead letter"):
        await a.replay(handle.task_id)
    # Node A drops the letter another node replayed within a round.
    await until(lambda: a.dead_letters() == [])


async def test_every_node_shows_the_clusters_counters(pg_url: str, stack: AsyncExitStack
                                                      ) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    await stack.enter_async_context(agent_with("worker").connect(a.url))
    for reach, calls in ((a, 2), (b, 3)):
        await until(lambda r=reach: any(v["name"] == "worker" and v["state"] == "online"
                                        for v in r.agents()))
        client = await stack.enter_async_context(Client.connect(reach.url, caller="p"))
        for n in range(calls):
            await client.call("work.do", {"n": n}, timeout=10)

    def seen(reach: Reach) -> dict[str, Any]:
        cluster: dict[str, Any] = reach.metrics()["cluster"]
        return cluster

    # Each node's own calls, and the sum, on both nodes once each has renewed its lease.
    for reach in (a, b):
        await until(lambda r=reach: seen(r)["totals"]["succeeded"] == 5)
        view = seen(reach)
        assert {n: t["succeeded"] for n, t in view["nodes"].items()} == {"node-a": 2,
                                                                         "node-b": 3}
        assert view["capabilities"]["work.do"]["succeeded"] == 5
    assert "cluster" not in (await stack.enter_async_context(
        Reach.start(http_port=None))).metrics()  # a lone coordinator has no cluster part


async def test_a_cancel_sent_to_another_node_says_where_the_task_runs(
        pg_url: str, stack: AsyncExitStack) -> None:
    """A cancel reaches the tasks of the coordinator it is sent to: sent to a node that does
    not run the task, it is refused (``unavailable``) rather than answered with a task that
    goes on running; sent to the owner, it cancels."""
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    gate = asyncio.Event()
    await stack.enter_async_context(agent_with("worker", gate).connect(a.url))
    first = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    handle = await first.submit("work.do", {"n": 8})
    other = await stack.enter_async_context(Client.connect(b.url, caller="planner"))
    with pytest.raises(Unavailable, match="run by another coordinator"):
        await other.cancel(handle.task_id)
    assert (await first.cancel(handle.task_id))["state"] == "cancelled"
    gate.set()


def one_slot(gate: asyncio.Event, runs: list[int]) -> Agent:
    """The backlog drills' agent: one slot, ``work.one`` notes each ``n`` it runs, and holds
    the slot on ``n`` 0 until ``gate`` is set, so the others wait their turn."""
    agent = Agent("only", heartbeat_interval=0.05, max_concurrency=1)

    @agent.capability("work.one", idempotent=True, latency_ms=5000)
    async def one(n: int) -> int:
        runs.append(n)
        if n == 0:
            await gate.wait()
        return n

    return agent


async def test_a_nodes_backlog_drains_to_another_nodes_agent_in_order(
        pg_url: str, stack: AsyncExitStack) -> None:
    """Issue 27: a node's backlog drains to any node's agent. Node A has no agent; node B's
    one agent has one slot, held. Five submits at A wait their turn at A (none refused),
    then run at B's agent one at a time, in the order they were submitted."""
    a = await node(stack, pg_url, "node-a", priority_aging=0.01)
    b = await node(stack, pg_url, "node-b")
    gate, runs = asyncio.Event(), []
    agent = one_slot(gate, runs)
    await stack.enter_async_context(agent.connect(b.url))
    await until(lambda: any(v["name"] == "only" for v in a.agents()))
    client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    handles = [await client.submit("work.one", {"n": n}) for n in range(5)]
    await until(lambda: runs == [0])
    await asyncio.sleep(0.3)  # past queue_wait: the four still wait at A, none refused
    assert a.metrics()["backlog"]["work.one"]["waiting"] == 4
    gate.set()
    assert [await h.result(timeout=10) for h in handles] == [0, 1, 2, 3, 4]
    assert runs == [0, 1, 2, 3, 4]


async def test_a_taken_over_nodes_backlog_keeps_its_order(pg_url: str,
                                                          stack: AsyncExitStack) -> None:
    """Issue 27: a taken-over node's backlog keeps its order. Node B holds five submits for a
    one-slot agent: the first running, four waiting with priorities that put them out of
    submit order. B is cut off from the database and fences itself; A takes its tasks over,
    the agent moves to A, and the four run there in the order B would have run them (highest
    priority first), each once; the running one is joined, not run again. Aging is all but
    off on both nodes (a level per 100 s, not per 20 ms): the submits are awaited one by one,
    and on a slow host an older task one level lower would rightly overtake a newer one."""
    a = await node(stack, pg_url, "node-a", priority_aging=0.01)
    b = await node(stack, pg_url, "node-b", priority_aging=0.01)
    gate, runs = asyncio.Event(), []
    agent = one_slot(gate, runs)
    await stack.enter_async_context(agent.connect([b.url, a.url], prefer="first"))
    await until(lambda: any(v["name"] == "only" and v["node"] == "node-b"
                            for v in a.agents()))
    client = await stack.enter_async_context(Client.connect(b.url, caller="planner"))
    priorities = {0: 0, 1: 0, 2: 3, 3: 1, 4: 2}
    ids = [(await client.submit("work.one", {"n": n}, priority=p, idempotency_key=f"n-{n}"
                                )).task_id for n, p in priorities.items()]
    await until(lambda: runs == [0])
    await until(lambda: b.metrics()["backlog"].get("work.one", {}).get("waiting") == 4)
    cut_off(b)
    await until(lambda: b.cluster is not None and b.cluster.fenced, 5)
    await until(lambda: a.cluster is not None and a.cluster.taken_over == 5, 10)
    await until(lambda: any(v["name"] == "only" and v["node"] == "node-a"
                            and v["state"] == "online" for v in a.agents()))
    gate.set()
    mover = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    assert [await mover.result(task_id, timeout=10) for task_id in ids] == [0, 1, 2, 3, 4]
    assert runs == [0, 2, 4, 3, 1]
