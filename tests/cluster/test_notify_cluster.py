"""Completion webhooks in a cluster with the A2A door off (docs/webhooks.md, docs/cluster.md):
a webhook kept by the node that accepted the task moves with the task when that node is cut
off, and the survivor sends it, once; the fenced node sends nothing. PostgreSQL, a loopback
receiver, the SDK."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import pytest
from notify_rig import LOOPBACK, receiver, verifier
from test_cluster_pg import cut_off, until
from test_protocol_doors import sees, slow

from reach import Client, Reach

pytestmark = pytest.mark.timeout(60)

TOKENS = {"tok-alice": "alice", "tok-s": "slow"}
OPTIONS: dict[str, Any] = dict(heartbeat_interval=0.05, suspect_after=4.0, offline_after=6.0,
                               ack_timeout=1.0, drain_timeout=0.5, http_port=None,
                               tokens=TOKENS, lease_s=1.0, admin_token="t",
                               notify_allow=LOOPBACK)


async def node(stack: AsyncExitStack, url: str, name: str) -> Reach:
    return await stack.enter_async_context(Reach.start(store=url, cluster=True, node_id=name,
                                                       **OPTIONS))


async def test_a_taken_over_tasks_webhook_is_sent_by_the_survivor(
        pg_url: str, stack: AsyncExitStack) -> None:
    a = await node(stack, pg_url, "node-a")
    b = await node(stack, pg_url, "node-b")
    assert a.a2a is None and b.a2a is None
    gate, runs = asyncio.Event(), []
    agent = slow(gate, runs)
    await stack.enter_async_context(agent.connect([b.url, a.url]))  # moves to A when B goes
    await until(lambda: sees(b, "slow"))
    hook = await stack.enter_async_context(receiver())
    client = await stack.enter_async_context(Client.connect(b.url, caller="alice",
                                                            token="tok-alice"))
    handle = await client.submit("slow.read", {}, notify=hook.url)
    await until(lambda: runs == [1])
    cut_off(b)
    await until(lambda: b.cluster is not None and b.cluster.fenced, 5)
    await until(lambda: a.cluster is not None and a.cluster.taken_over == 1)
    gate.set()
    delivery = await hook.one(10)
    assert delivery.json["task_id"] == handle.task_id
    assert delivery.json["state"] == "succeeded"
    assert verifier()("tok-alice", delivery.headers, delivery.body)  # signed as B would have
    await until(lambda: handle.task_id not in b.pusher.configs)
    await asyncio.wait_for(b.pusher.settled(), 5)
    assert (a.pusher.delivered, b.pusher.delivered) == (1, 0) and hook.tries == 1
