"""Routing tags end to end: a real coordinator, two websocket agents (region eu and us), calls
through the client SDK and the REST front door.

Field: "capability `tags` used for routing (`client.call(..., tags={"region": "eu"})`)" —
data that must stay in a region is only ever sent to an agent that says it is there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import httpx
import pytest
import websockets

from reach import Agent, Client, InvalidParams, NoRoute, ReachError, Unavailable
from reach.testing import Cluster, wait_until

CAP = "geo.lookup"


async def start(**options: Any) -> tuple[Cluster, list[str]]:
    cluster = await Cluster.start(**options)
    served: list[str] = []
    for name, region in (("eu-agent", "eu"), ("us-agent", "us")):
        def handler(q: str, _name: str = name) -> dict[str, str]:
            served.append(_name)
            return {"q": q, "by": _name}
        await cluster.add_agent(name, {CAP: handler}, idempotent=True,
                                tags=[f"region={region}", "tier=gold"])
    return cluster, served


async def test_tagged_calls_land_on_the_agent_declaring_the_tags() -> None:
    cluster, served = await start()
    try:
        client = await cluster.client("planner")
        for _ in range(10):
            assert (await client.call(CAP, {"q": "x"}, tags={"region": "eu"}, timeout=5)
                    )["by"] == "eu-agent"
        for _ in range(10):
            assert (await client.call(CAP, {"q": "x"}, tags={"region": "us", "tier": "gold"},
                                      timeout=5))["by"] == "us-agent"
        handle = await client.submit(CAP, {"q": "y"}, tags={"region": "eu"})
        assert (await handle.result(5))["by"] == "eu-agent"
        assert (await client.call_intent("geo lookup", {"q": "i"}, tags={"region": "us"},
                                         timeout=5))["by"] == "us-agent"
        assert (await client.call(CAP, {"q": "z"}, tags={"tier": True}, timeout=5))["by"] in (
            "eu-agent", "us-agent")
        # untagged calls still go to either
        for _ in range(40):
            await client.call(CAP, {"q": "x"}, timeout=5)
        assert Counter(served[-40:]).keys() == {"eu-agent", "us-agent"}
    finally:
        await cluster.close()


async def test_no_agent_with_the_tags_is_no_route_at_once_with_what_is_declared() -> None:
    cluster, served = await start()
    try:
        client = await cluster.client("planner")
        started = time.perf_counter()
        with pytest.raises(NoRoute) as err:
            await client.call(CAP, {"q": "x"}, tags={"region": "ap"}, timeout=30)
        assert time.perf_counter() - started < 5  # an answer, not the 30 s timeout
        assert err.value.details["available"] == ["region=eu", "region=us"]
        assert err.value.details["tags"] == {"region": "ap"}
        assert err.value.details["capability"] == CAP
        with pytest.raises(NoRoute):
            await client.submit(CAP, {"q": "x"}, tags={"gpu": True})
        assert served == []
    finally:
        await cluster.close()


async def test_tagged_agent_gone_means_unavailable_not_the_other_region() -> None:
    cluster, served = await start()
    try:
        client = await cluster.client("planner")
        eu = cluster.agents[0]
        await eu.close(drain=1.0)
        cluster.agents.remove(eu)
        await wait_until(lambda: not any(
            a["name"] == "eu-agent" and a["state"] == "online" and a["connected"]
            for a in cluster.reach.agents()))
        with pytest.raises((Unavailable, NoRoute)):
            await client.call(CAP, {"q": "x"}, tags={"region": "eu"}, timeout=5)
        assert "eu-agent" not in served and "us-agent" not in served
    finally:
        await cluster.close()


async def test_fail_over_stays_within_the_tagged_set() -> None:
    """Two eu agents and one us agent; the first eu agent faults every time: a tagged
    idempotent call fails over to the other eu agent, never to us."""
    cluster = await Cluster.start()
    served: list[str] = []
    try:
        def broken(q: str) -> None:
            served.append("eu-broken")
            raise RuntimeError("boom")

        def good(name: str) -> Any:
            def run(q: str) -> str:
                served.append(name)
                return name
            return run
        await cluster.add_agent("eu-broken", {CAP: broken}, idempotent=True, weight=1000,
                                tags=["region=eu"])
        await cluster.add_agent("eu-good", {CAP: good("eu-good")}, idempotent=True, weight=1,
                                tags=["region=eu"])
        await cluster.add_agent("us", {CAP: good("us")}, idempotent=True, weight=1000,
                                tags=["region=us"])
        client = await cluster.client("planner")
        for _ in range(6):
            assert await client.call(CAP, {"q": "x"}, tags={"region": "eu"}, timeout=5) \
                == "eu-good"
        assert "us" not in served and "eu-broken" in served
    finally:
        await cluster.close()


@pytest.mark.parametrize("tags", [
    {f"k{i}": "v" for i in range(17)},
    {"region": "e" * 101},
    {"region": 1},
    {"region": False},
    {"a=b": "eu"},
    {"region": ["eu"]},
])
async def test_bad_tags_are_invalid_params_in_the_sdk(tags: Any) -> None:
    cluster, served = await start()
    try:
        client = await cluster.client("planner")
        with pytest.raises(InvalidParams):
            await client.call(CAP, {"q": "x"}, tags=tags, timeout=5)
        with pytest.raises(InvalidParams):
            await client.submit(CAP, {"q": "x"}, tags=tags)
        assert served == []
    finally:
        await cluster.close()


async def raw_submit(url: str, tags: Any) -> dict[str, Any]:
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "caller": "raw"}))
        assert json.loads(await ws.recv())["type"] == "welcome"
        await ws.send(json.dumps({"v": 1, "type": "submit", "id": 7, "capability": CAP,
                                  "params": {"q": "x"}, "tags": tags}))
        async with asyncio.timeout(5):
            return json.loads(await ws.recv())


@pytest.mark.parametrize("tags,code", [
    ({f"k{i}": "v" for i in range(17)}, "protocol_error"),
    ({"region": "e" * 101}, "protocol_error"),
    ({"region": 1}, "protocol_error"),
    ({"region": ["eu"]}, "protocol_error"),
    ("region=eu", "protocol_error"),
    ({"region": False}, "invalid_params"),
    ({"a=b": "eu"}, "invalid_params"),
    ({"region": "ap"}, "no_route"),
])
async def test_bad_tags_on_the_wire_get_a_stable_code(tags: Any, code: str) -> None:
    cluster, served = await start()
    try:
        frame = await raw_submit(cluster.url, tags)
        assert frame["type"] == "error" and frame["id"] == 7
        assert frame["error"]["code"] == code
        assert served == []
    finally:
        await cluster.close()


async def test_the_rest_front_door_routes_by_tags() -> None:
    cluster, served = await start()
    try:
        base = cluster.reach.http_url
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            r = await http.post("/v1/tasks", json={"capability": CAP, "params": {"q": "x"},
                                                   "tags": {"region": "us"}})
            assert r.status_code == 202, r.text
            task_id = r.json()["task_id"]
            done = (await http.get(f"/v1/tasks/{task_id}", params={"wait": 5})).json()
            assert done["result"]["by"] == "us-agent"
            r = await http.post("/v1/tasks", json={"capability": CAP, "params": {"q": "x"},
                                                   "tags": {"region": "ap"}})
            assert r.status_code == 404 and r.json()["code"] == "no_route", r.text
            assert r.json()["details"]["available"] == ["region=eu", "region=us"]
            r = await http.post("/v1/tasks", json={"capability": CAP, "params": {"q": "x"},
                                                   "tags": {"region": 5}})
            assert r.status_code == 422, r.text
            for bad in ({"a=b": "eu"}, {"region": False}, {"region": 1}):
                r = await http.post("/v1/tasks", json={"capability": CAP, "params": {"q": "x"},
                                                       "tags": bad})
                assert r.status_code == 422, r.text
            r = await http.post("/v1/intent", json={"intent": "geo lookup", "params": {"q": "x"},
                                                    "tags": {"region": "ap"}})
            assert r.status_code == 404 and r.json()["details"]["tags"] == {"region": "ap"}
            r = await http.post("/v1/intent", json={"intent": "geo lookup", "params": {"q": "x"},
                                                    "tags": {"region": "eu"}})
            assert r.status_code == 200 and r.json()["result"]["by"] == "eu-agent", r.text
    finally:
        await cluster.close()
    assert served == ["us-agent", "eu-agent"]


async def test_an_agent_declares_tags_through_the_sdk_as_strings() -> None:
    cluster = await Cluster.start()
    try:
        agent = Agent("gpu-box", reconnect_base=0.02)

        @agent.capability("img.render", tags=["gpu", "gpu=a100"])
        async def render(n: int) -> int:
            return n
        await agent.connect(cluster.url)
        cluster.agents.append(agent)
        client: Client = await cluster.client("c")
        assert await client.call("img.render", {"n": 2}, tags={"gpu": "a100"}, timeout=5) == 2
        assert await client.call("img.render", {"n": 3}, tags={"gpu": True}, timeout=5) == 3
        with pytest.raises(ReachError) as err:
            await client.call("img.render", {"n": 3}, tags={"gpu": "h100"}, timeout=5)
        assert err.value.code == "no_route"
        assert err.value.details["available"] == ["gpu=a100"]
    finally:
        await cluster.close()
