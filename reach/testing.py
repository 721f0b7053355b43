"""Test helpers and the pytest plugin (entry point ``pytest11``): in-memory clusters on loopback.

In your own suite (with pytest-asyncio)::

    async def test_my_planner(reach_cluster):
        await reach_cluster.add_agent("sales", {"sales.query": query_sales}, idempotent=True)
        client = await reach_cluster.client("planner")
        assert await client.call("sales.query", {"region": "east"}) == {...}

Each cluster is a real coordinator on a free loopback port with an in-memory store and
millisecond heartbeats; it shares nothing with any other cluster and stops with the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from .agent import Agent
from .client import Client
from .reach import Reach


async def wait_until(predicate: Callable[[], bool], timeout: float = 3.0,
                     interval: float = 0.005) -> None:
    """Poll ``predicate`` until it holds; ``AssertionError`` after ``timeout`` seconds.
    For conditions that become true by themselves (an agent going offline, say)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


class Cluster:
    """A coordinator plus the agents and clients a test adds; ``close()`` stops them all."""

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.agents: list[Agent] = []
        self.clients: list[Client] = []

    @classmethod
    async def start(cls, **options: Any) -> Cluster:
        """Start a coordinator; options are ``Reach.start`` options (fast defaults for tests)."""
        defaults: dict[str, Any] = {"heartbeat_interval": 0.05, "ack_timeout": 1.0,
                                    "recovery_grace": 0.5}
        defaults.update(options)
        return cls(await Reach.start(**defaults))

    @property
    def url(self) -> str:
        return self.reach.url

    async def add_agent(self, name: str, handlers: Mapping[str, Callable[..., Any]], *,
                        max_concurrency: int = 20, token: str | None = None,
                        **capability: Any) -> Agent:
        """Connect an agent serving ``{capability name: function}``; extra keywords
        (``params``, ``idempotent``, ``latency_ms``, ``weight``, ``scope``, ``intents``) apply
        to every capability."""
        agent = Agent(name, token=token, max_concurrency=max_concurrency, reconnect_base=0.02)
        for cap_name, fn in handlers.items():
            agent.capability(cap_name, **capability)(fn)
        await agent.connect(self.url)
        self.agents.append(agent)
        return agent

    async def client(self, caller: str = "test", token: str | None = None) -> Client:
        client = await Client.connect(self.url, caller=caller, token=token)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for agent in self.agents:
            await agent.close(drain=1.0)
        await self.reach.stop()


async def _cluster() -> AsyncIterator[Cluster]:
    cluster = await Cluster.start()
    try:
        yield cluster
    finally:
        await cluster.close()


try:  # the fixture needs pytest-asyncio; without it, the plugin adds nothing
    import pytest_asyncio

    reach_cluster = pytest_asyncio.fixture(_cluster, name="reach_cluster")
except ImportError:  # pragma: no cover
    pass
