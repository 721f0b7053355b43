"""Helpers of the cluster tests: coordinators linked as peers in one process (each its own
in-memory SQLite store, its own port, millisecond heartbeats)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from reach import Agent, Client, Reach
from reach.cluster import handshake

BEAT = 0.05  # heartbeat_interval (10 s in the field)
TOKEN = "cluster-token"
# Suspected after 4 silent beats, offline after 6 (200 and 300 ms): a loaded test machine
# stalls the loop longer than 2-3 beats of 50 ms now and then.
OPTIONS: dict[str, Any] = dict(heartbeat_interval=BEAT, suspect_after=4, offline_after=6,
                               peer_token=TOKEN, http_port=None, warmup=0.0,
                               ack_timeout=1.0, peer_flush=0.005)

def challenge(hello: dict[str, Any], node: str, secret: str = TOKEN,
              nonce: str = "b" * 32) -> dict[str, Any]:
    """What a holder named ``node`` that knows ``secret`` answers a peer ``hello`` with
    (docs/protocol.md §14): its nonce and its proof over both nonces and both node ids."""
    return {"type": "challenge", "node": node, "nonce": nonce,
            "proof": handshake.mac(secret, "holder", hello["node"], node, hello["nonce"],
                                   nonce)}


class Nodes:
    """Coordinators, agents and clients of one test, stopped in reverse order at its end."""

    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack = stack

    async def node(self, node: str, **options: Any) -> Reach:
        return await self.stack.enter_async_context(
            Reach.start(node_id=node, **{**OPTIONS, **options}))

    async def serve(self, agent: Agent, url: str) -> Agent:
        await self.stack.enter_async_context(agent.connect(url))
        return agent

    async def client(self, url: str, caller: str = "planner") -> Client:
        return await self.stack.enter_async_context(Client.connect(url, caller=caller))


async def link(*nodes: Reach) -> None:
    """Link every node to every other and wait until each has the others' snapshots."""
    for a in nodes:
        for b in nodes:
            if a is not b:
                await a.peers.add(b.node.node_id, b.url)
    for a in nodes:
        for b in nodes:
            if a is not b:
                await a.peers.synced(b.node.node_id, timeout=5)


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (polling every millisecond or so) until ``check()`` holds."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.002)


def view(reach: Reach, name: str) -> dict[str, Any]:
    return reach.agents(names={name})[0]


def echo_agent(name: str, cap: str = "text.echo", **options: Any) -> Agent:
    agent = Agent(name)

    @agent.capability(cap, idempotent=True, latency_ms=200, **options)
    async def echo(text: str) -> dict[str, str]:
        return {"text": text, "by": name}

    return agent
