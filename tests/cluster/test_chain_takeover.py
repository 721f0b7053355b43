"""A chain step that succeeded on a node that left (or died) before its next step started is
carried on by a survivor (docs/chains.md "Restarts", docs/cluster.md "Fail-over"): the next
step starts once, however many survivors race for it, and runs on a real agent."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest
from test_cluster_pg import LEASE, SLACK, node, until

from reach import Agent, Client, Reach
from reach.core import chains

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
