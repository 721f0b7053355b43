"""A chain step that succeeded on a node that left (or died) before its next step started is
carried on by a survivor (docs/chains.md "Restarts", docs/cluster.md "Fail-over"): the next
step starts once, however many survivors race for it, and runs on a real agent."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest
from test_cluster_pg import LEASE, SLACK, node, until

from reach import Agent, Client, Reach
from reach.core import chains
from reach.core.keys import scoped_key
from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.store.nodes import Nodes
from reach.store.store import Store

pytestmark = pytest.mark.timeout(60)


def chain_agent(gate: asyncio.Event, runs: list[str]) -> Agent:
    """``chain.head`` waits for ``gate``; ``chain.next`` adds one. ``runs`` lists each run."""
    agent = Agent("chainer", heartbeat_interval=0.05)

    @agent.capability("chain.head", idempotent=True, latency_ms=5000)
    async def head(n: int) -> dict[str, Any]:
        runs.append("head")
        await gate.wait()
        return {"n": n}

    @agent.capability("chain.next", idempotent=True, latency_ms=5000)
    async def step(n: int) -> dict[str, Any]:
        runs.append("next")
        return {"n": n + 1}

    return agent


def rows(pg_url: str, capability: str) -> list[tuple[Any, ...]]:
    """(task id, owner, state, history) of the stored tasks of ``capability``."""
    with psycopg.connect(pg_url) as conn:
        return list(conn.execute(
            "SELECT task_id, owner, state, history FROM reach_tasks WHERE capability = %s",
            (capability,)))


def nodes_left(pg_url: str) -> list[tuple[str, bool]]:
    """(node id, lease live) of every row of reach_nodes."""
    with psycopg.connect(pg_url) as conn:
        return list(conn.execute(
            "SELECT node_id, lease_until > extract(epoch from clock_timestamp()) "
            "FROM reach_nodes ORDER BY node_id"))


async def strand(pg_url: str, stack: AsyncExitStack, runs: list[str], *others: Reach) -> str:
    """Node B runs a chain's head and stops while it runs: the head succeeds in the drain,
    its next step is refused (``unavailable``: B accepts nothing any more), and B leaves.
    The agent, dialled to B first, moves on to the ``others``. The head's task id."""
    b = await Reach.start(store=pg_url, cluster=True, node_id="node-b", lease_s=LEASE,
                          admin_token="t", heartbeat_interval=0.05, http_port=None, **SLACK)
    gate = asyncio.Event()
    agent = chain_agent(gate, runs)
    stack.push_async_callback(agent.close)
    await agent.connect([b.url, *(r.url for r in others)])
    await until(lambda: any(v["name"] == "chainer" and v["state"] == "online"
                            for v in b.agents()))
    caller = await Client.connect(b.url, caller="planner")
    handle = await caller.submit("chain.head", {"n": 1}, idempotency_key="chain-1",
                                 then=["chain.next"])
    await until(lambda: runs == ["head"])
    stopping = asyncio.ensure_future(b.stop())
    await until(lambda: not b.gateway.accepting)
    gate.set()
    await stopping
    await caller.close()
    assert runs == ["head"]  # the next step never started on B
    [(head_id, owner, state, history)] = rows(pg_url, "chain.head")
    assert (head_id, owner, state) == (handle.task_id, "node-b", "succeeded")
    assert chains.NEXT not in history and chains.STOPPED not in history
    return head_id


async def test_a_chain_a_stopped_node_left_stranded_is_carried_on_by_a_survivor(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    runs: list[str] = []
    head_id = await strand(pg_url, stack, runs, a)
    # B's row stays, its lease ended, while it owns a stranded step: so A finds it.
    client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    assert await client.result(head_id, timeout=10) == {"n": 2}  # the chain's end
    assert runs == ["head", "next"]
    # (a task's end is written behind its answer)
    await until(lambda: [r[1:3] for r in rows(pg_url, "chain.next")] == [("node-a", "succeeded")])
    [(next_id, *_)] = rows(pg_url, "chain.next")
    [(_, head_owner, _, history)] = rows(pg_url, "chain.head")
    assert head_owner == "node-a" and history.count(chains.NEXT) == 1
    view = await client.status(head_id)
    assert view["chain"]["next"] == next_id
    await until(lambda: nodes_left(pg_url) == [("node-a", True)])  # B's row went with it
    assert a.cluster is not None and a.cluster.taken_over == 1


async def test_two_survivors_racing_start_the_stranded_chains_next_step_once(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    c = await node(stack, pg_url, "node-c")
    runs: list[str] = []
    head_id = await strand(pg_url, stack, runs, a, c)
    assert a.cluster is not None and c.cluster is not None
    await asyncio.gather(a.cluster.tick(), c.cluster.tick())  # (besides their own rounds)
    client = await stack.enter_async_context(Client.connect(c.url, caller="planner"))
    assert await client.result(head_id, timeout=10) == {"n": 2}
    await until(lambda: [r[2] for r in rows(pg_url, "chain.next")] == ["succeeded"])
    [(next_id, *_)] = rows(pg_url, "chain.next")
    assert runs == ["head", "next"]
    assert a.cluster.taken_over + c.cluster.taken_over == 1  # one of them moved the head
    [(_, owner, _, history)] = rows(pg_url, "chain.head")
    assert owner in ("node-a", "node-c") and history.count(chains.NEXT) == 1
    assert (await client.status(head_id))["chain"]["next"] == next_id

    # A node that read the head before its note (B restarted, say) starts the step again:
    # its derived key is taken, so that is the step already run, not a second one.
    other = c if owner == "node-a" else a
    stale = await other.gateway.task(head_id)
    assert stale is not None
    stale.history = [h for h in stale.history if not h[2].startswith(chains.NEXT)]
    assert other.gateway.chains.carry_on([stale]) == 1
    await until(lambda: chains.next_of(stale.history) == next_id)
    assert [r[0] for r in rows(pg_url, "chain.next")] == [next_id]
    assert runs == ["head", "next"]
    [(_, _, _, history)] = rows(pg_url, "chain.head")
    assert history.count(chains.NEXT) == 1  # (the other node owns it no more: no write)



# ------------------------------------------------------------------ a crash's aftermath


def succeeded_step(created: float, then: bool = True, note: str = "") -> Task:
    """A ``chain.head`` task that succeeded with ``{"n": 1}``, as its node's store wrote it:
    with ``chain.next`` after it (``then``), and ``note`` last in its history."""
    tid = os.urandom(8).hex()
    env = Envelope(task_id=tid, trace_id=tid, capability="chain.head", params={"n": 0},
                   caller="planner", idempotency_key=scoped_key("planner", f"k-{tid}"),
                   created_at=created, then=chains.steps_of(["chain.next"]) if then else ())
    task = new_task(env, created)
    task.move(TaskState.SUCCEEDED, created + 0.5)
    task.result = {"n": 1}
    if note:
        task.history.append((TaskState.SUCCEEDED.value, created + 0.5, note))
    return task


async def write(store: Store, *tasks: Task) -> None:
    for task in tasks:
        await store.insert(task)
        await store.persist(task)


def owners(pg_url: str) -> dict[str, str]:
    with psycopg.connect(pg_url) as conn:
        return dict(conn.execute("SELECT task_id, owner FROM reach_tasks").fetchall())


async def test_survivors_racing_move_a_dead_nodes_stranded_steps_once_each(
        open_store: Callable[..., Any], pg_url: str) -> None:
    dead = await open_store(node_id="dead")
    stranded = [succeeded_step(100.0 + i) for i in range(5)]
    old = succeeded_step(10.0)  # before ``since``: its derived keys are forgotten
    settled = [succeeded_step(101.0, note=chains.NEXT + "abc"),
               succeeded_step(102.0, note=chains.STOPPED + "no_route: gone"),
               succeeded_step(103.0, then=False)]  # (a chain's last step)
    await write(dead, *stranded, old, *settled)
    n_dead = Nodes(dead)
    await n_dead.join("dead", "ws://dead", lease_s=0.01)  # its last renewal, then silence
    s1, s2 = Nodes(await open_store(node_id="s1")), Nodes(await open_store(node_id="s2"))
    await s1.join("s1", "ws://s1", lease_s=30)
    await s2.join("s2", "ws://s2", lease_s=30)
    await asyncio.sleep(0.03)
    # No unfinished task is left, but the node still is, with its stranded steps.
    assert await s1.orphan_owners() == ["dead"]

    async def drain(nodes: Nodes, me: str) -> list[Task]:
        got: list[Task] = []
        while batch := await nodes.take_over("dead", me, limit=2, since=50.0):
            got += batch
        return got
    got1, got2 = await asyncio.gather(drain(s1, "s1"), drain(s2, "s2"))
    ids1, ids2 = {t.task_id for t in got1}, {t.task_id for t in got2}
    assert not ids1 & ids2 and ids1 | ids2 == {t.task_id for t in stranded}
    assert all(t.state is TaskState.SUCCEEDED and t.result == {"n": 1} for t in got1 + got2)
    held = owners(pg_url)
    assert {held[t.task_id] for t in [old, *settled]} == {"dead"}  # left where they were
    assert await s1.orphan_owners() == []  # the dead node's row went with its last step
    assert await s1.expired() == []


async def test_a_node_that_leaves_with_a_stranded_step_stays_listed_until_it_is_moved(
        open_store: Callable[..., Any]) -> None:
    b, c = await open_store(node_id="b"), await open_store(node_id="c")
    await write(b, succeeded_step(100.0))
    n_b, n_c, n_a = Nodes(b), Nodes(c), Nodes(await open_store(node_id="a"))
    for nodes, name in ((n_a, "a"), (n_b, "b"), (n_c, "c")):
        await nodes.join(name, f"ws://{name}", lease_s=30)
    await n_b.leave(since=50.0)
    await n_c.leave(since=50.0)  # (nothing stranded: its row goes)
    assert [n.node_id for n in await n_a.expired()] == ["b"]
    assert await n_b.renew() is False  # its lease ended all the same
    assert await n_a.orphan_owners() == ["b"]
    assert [t.envelope.capability for t in await n_a.take_over("b", "a", since=50.0)] == ["chain.head"]
    assert await n_a.orphan_owners() == [] and await n_a.expired() == []


async def test_a_killed_nodes_stranded_chain_runs_on_at_a_survivor(
        open_store: Callable[..., Any], pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    runs: list[str] = []
    await stack.enter_async_context(chain_agent(asyncio.Event(), runs).connect(a.url))
    await until(lambda: any(v["name"] == "chainer" for v in a.agents()))
    # Node B ran a chain's head, then was killed before its next step started.
    dead = await open_store(node_id="node-b")
    head = succeeded_step(time.time() - 5)  # (within the idempotency TTL)
    await write(dead, head)
    await Nodes(dead).join("node-b", "ws://node-b", lease_s=0.01)  # its last renewal
    client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
    assert await client.result(head.task_id, timeout=10) == {"n": 2}
    assert runs == ["next"]
    await until(lambda: [r[1:3] for r in rows(pg_url, "chain.next")] == [("node-a", "succeeded")])
    [(next_id, *_)] = rows(pg_url, "chain.next")
    view = await client.status(head.task_id)
    assert view["chain"]["next"] == next_id and view["state"] == "succeeded"
    assert owners(pg_url)[head.task_id] == "node-a"
