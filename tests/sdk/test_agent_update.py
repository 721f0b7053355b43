"""An agent changes what it declares on its open connection (docs/protocol.md §15): the
record, its counters and the calls in flight stay; new calls are routed by the new set; a
refused update leaves the agent serving what it had."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from reach import Agent, Unauthorized
from reach.errors import ReachError
from reach.testing import Cluster


async def test_an_update_adds_and_withdraws_without_dropping_calls_in_flight(
        reach_cluster: Cluster) -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow done"

    async def fast() -> str:
        return "fast"

    agent = await reach_cluster.add_agent("worker", {"a.slow": slow})
    first_id = agent.agent_id
    client = await reach_cluster.client()
    running = asyncio.ensure_future(client.call("a.slow", timeout=10))
    await asyncio.sleep(0.05)
    agent.capability("b.fast", idempotent=True)(fast)
    assert sorted(await agent.update()) == ["a.slow", "b.fast"]
    assert await client.call("b.fast") == "fast"
    release.set()
    assert await running == "slow done"  # delivered before the update, finished after it
    [view] = reach_cluster.reach.agents()
    assert view["agent_id"] == first_id and sorted(view["capabilities"]) == ["a.slow", "b.fast"]

    agent.withdraw("a.slow")
    assert await agent.update() == ["b.fast"]
    with pytest.raises(ReachError) as gone:
        await client.call("a.slow", timeout=2)
    assert gone.value.code in ("no_route", "unavailable")
    with pytest.raises(ValueError, match="declares no capability 'a.slow'"):
        agent.withdraw("a.slow")
    agent.withdraw("b.fast")
    with pytest.raises(ValueError, match="would declare no capability"):
        await agent.update()


async def test_a_refused_update_keeps_what_the_agent_had() -> None:
    cluster = await Cluster.start(tokens={"w-secret": "worker", "c-secret": "caller"},
                                  serves={"worker": ["a.*"]})
    try:
        async def run() -> int:
            return 1

        agent = await cluster.add_agent("worker", {"a.run": run}, token="w-secret")
        agent.capability("payments.charge")(run)
        with pytest.raises(Unauthorized):
            await agent.update()
        client = await cluster.client("caller", token="c-secret")
        assert await client.call("a.run") == 1
        assert cluster.reach.agents()[0]["capabilities"] == ["a.run"]
    finally:
        await cluster.close()


async def test_an_update_keeps_the_name_and_an_unconnected_agent_cannot_update(
        reach_cluster: Cluster) -> None:
    def register(name: str, cap: str) -> str:
        return json.dumps({"v": 1, "type": "register", "name": name,
                           "capabilities": [{"name": cap}]})

    async with websockets.connect(reach_cluster.url) as ws:
        await ws.send(register("raw", "raw.one"))
        assert json.loads(await ws.recv())["type"] == "welcome"
        await ws.send(register("other", "raw.two"))
        refused = json.loads(await ws.recv())
        assert refused["type"] == "error" and refused["error"]["code"] == "invalid_params"
        assert refused["error"]["details"]["type"] == "register"
        assert "keeps the name" in refused["error"]["message"]
        await ws.send(register("raw", "raw.two"))  # the connection is still open
        assert json.loads(await ws.recv())["capabilities"] == ["raw.two"]
    idle = Agent("idle")
    idle.capability("x.run")(lambda: 1)
    with pytest.raises(RuntimeError, match="not connected"):
        await idle.update()
