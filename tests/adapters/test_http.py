"""HttpAgent against a real REST service (tests/adapters/http_service.py: an ASGI app on
uvicorn's h11 server, another stack than the adapter's aiohttp), through a real coordinator
and a real Client: what is sent, what each answer means, and the drills (500 then recovery,
a hang, a killed service, liveness)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach import Agent, Client, Reach, TaskError
from reach.adapters.http import HttpAgent
from reach.core.backoff import Backoff
from reach.errors import ReachError, TaskFailed
from reach.testing import wait_until

from .http_service import Answer, Seen, Service, js, serving

FAST = dict(heartbeat_interval=0.05, suspect_after=2, offline_after=40,
            backoff=Backoff(base=0.005, cap=0.02))


def agent(service: Service, caps: dict[str, Any], **kw: Any) -> HttpAgent:
    return HttpAgent("legacy", service.url, caps, **kw)


async def test_a_call_carries_params_and_reach_headers_and_returns_the_json() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        view = await reach.attach(agent(svc, {"orders.lookup": {
            "path": "/echo", "idempotent": True, "latency_ms": 500, "headers": {"X-Cap": "1"}}},
            headers={"Authorization": "Bearer s3cret"}, max_concurrency=8))
        assert view["kind"] == "http" and view["state"] == "online"
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("orders.lookup", {"order_id": 7, "note": "ü"},
                                         idempotency_key="k1", timeout=2)
            assert await handle.result(3) == {"got": {"order_id": 7, "note": "ü"}, "query": []}
        [seen] = svc.calls("/echo")
        h = seen.headers
        assert seen.method == "POST" and h["content-type"] == "application/json"
        assert h["idempotency-key"] == "planner/k1"
        assert h["x-reach-task-id"] == handle.task_id and h["x-reach-caller"] == "planner"
        assert h["traceparent"].split("-")[1] == handle.trace_id
        assert 1000 < int(h["x-reach-deadline-ms"]) <= 2000
        assert h["authorization"] == "Bearer s3cret" and h["x-cap"] == "1"
        assert reach.agents()[0]["calls"] == 1


async def test_get_sends_the_query_string_and_fills_the_path() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        svc.routes["/orders"] = lambda req: _answer(js(200, {"path": req.path,
                                                              "query": req.query}))
        await reach.attach(agent(svc, {
            "orders.get": {"method": "get", "path": "/orders/{order_id}", "latency_ms": 500},
            "orders.tag": {"path": "/orders/{order_id}/tags", "query": ["dry"],
                           "latency_ms": 500}}))
        async with Client.connect(reach.url) as client:
            got = await client.call("orders.get", {"order_id": "a/1 b", "fields": ["x", "y"],
                                                   "full": True, "n": 2})
            assert got == {"path": "/orders/a%2F1%20b",
                           "query": [["fields", "x"], ["fields", "y"], ["full", "true"],
                                     ["n", "2"]]}
            await client.call("orders.tag", {"order_id": 5, "dry": False, "tag": "vip"})
        get, post = svc.calls("/orders")
        assert get.method == "GET" and get.body == b""
        assert post.method == "POST" and post.path == "/orders/5/tags"
        assert post.query == [("dry", "false")] and post.json() == {"tag": "vip"}


async def test_text_is_wrapped_and_no_content_is_none() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        await reach.attach(agent(svc, {"greet.run": {"path": "/text", "latency_ms": 500},
                                       "noop.run": {"path": "/empty", "latency_ms": 500}}))
        async with Client.connect(reach.url) as client:
            assert await client.call("greet.run", {}) == {"text": "héllo"}
            assert await client.call("noop.run", {}) is None


async def test_a_4xx_is_an_answer_never_retried_and_not_a_fault() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        await reach.attach(agent(svc, {"orders.lookup": {"path": "/missing", "idempotent": True,
                                                         "latency_ms": 500}}))
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskError) as err:
                await client.call("orders.lookup", {"order_id": 1})
        details = err.value.details
        assert details["status"] == 404 and details["answer"] is True
        assert "no such order" in details["body"] and details["agent"] == "legacy"
        assert len(svc.calls("/missing")) == 1
        assert reach.agents()[0]["faults"] == 0 and reach.agents()[0]["breaker"] == "closed"


async def test_429_and_an_oversize_body_are_faults() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        svc.routes["/busy"] = lambda req: _answer(js(429, {}, **{"retry-after": "3"}))
        svc.routes["/big"] = lambda req: _answer(js(200, {"x": "y" * 5000}))
        await reach.attach(agent(svc, {"busy.run": {"path": "/busy", "latency_ms": 500},
                                       "big.run": {"path": "/big", "latency_ms": 500}},
                                 max_response_bytes=1000))
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskFailed) as busy:
                await client.call("busy.run", {})
            with pytest.raises(TaskFailed) as big:
                await client.call("big.run", {})
        assert not isinstance(busy.value, TaskError) and not isinstance(big.value, TaskError)
        remote = busy.value.details["remote"]["details"]  # a fault's error, as the agent gave it
        assert remote["status"] == 429 and remote["retry_after"] == 3
        assert "over the limit of 1000" in str(big.value)
        assert reach.agents()[0]["faults"] == 2


async def test_500_is_retried_opens_the_breaker_and_recovery_closes_it() -> None:
    async with serving() as svc, Reach.start(**FAST, breaker_open_for=0.2) as reach:
        failing = [True]

        async def flaky(req: Seen) -> Answer:
            return js(500, {"error": "db down"}) if failing[0] else js(200, {"ok": True})

        svc.routes["/flaky"] = flaky
        await reach.attach(agent(svc, {"orders.lookup": {"path": "/flaky", "idempotent": True,
                                                         "latency_ms": 500}}))
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError):
                await client.call("orders.lookup", {}, max_retries=1, timeout=1)
            assert len(svc.calls("/flaky")) == 2  # retried: it is idempotent
            for _ in range(4):
                with pytest.raises(ReachError):
                    await client.call("orders.lookup", {}, max_retries=0, timeout=1)
            await wait_until(lambda: reach.agents()[0]["breaker"] == "open")
            sent = len(svc.calls("/flaky"))
            with pytest.raises(ReachError):  # open: nothing reaches the service
                await client.call("orders.lookup", {}, timeout=0.1)
            assert len(svc.calls("/flaky")) == sent
            failing[0] = False
            await asyncio.sleep(0.2)
            assert await client.call("orders.lookup", {}, timeout=2) == {"ok": True}
        assert reach.agents()[0]["breaker"] == "closed"


async def test_a_hang_times_out_aborts_the_request_and_the_loop_keeps_going() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        # declared 2 s: it must still hang when the fast call is done (at 250 ms a slow
        # host's hang had timed out before the ``not slow.done()`` check)
        await reach.attach(agent(svc, {"slow.run": {"path": "/hang", "latency_ms": 2000}}))
        ws = Agent("ws-fast")

        @ws.capability("fast.run", latency_ms=500)
        async def fast() -> str:
            return "fast"

        async with ws.connect(reach.url), Client.connect(reach.url) as client:
            await wait_until(lambda: len(reach.agents()) == 2)
            slow = asyncio.ensure_future(client.call("slow.run", {}))  # times out at 2.4 s
            await wait_until(lambda: len(svc.calls("/hang")) == 1)
            assert await client.call("fast.run", {}) == "fast"  # meanwhile
            assert not slow.done()
            with pytest.raises(ReachError) as err:
                await slow
            assert err.value.code in ("timeout", "task_failed")
            # the gateway's timeout cancelled the invoke, which hung up on the service
            await asyncio.wait_for(svc.calls("/hang")[0].disconnected.wait(), 1)


async def test_a_killed_service_fails_over_to_a_websocket_agent_and_goes_suspected() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        http = agent(svc, {"orders.place": {"path": "/echo", "latency_ms": 500,
                                            "weight": 1000}})
        await reach.attach(http)
        ws = Agent("ws-orders")

        @ws.capability("orders.place", latency_ms=500, weight=1)
        async def place(**params: Any) -> dict[str, Any]:
            return {"by": "websocket"}

        async with ws.connect(reach.url), Client.connect(reach.url) as client:
            await wait_until(lambda: len(reach.agents()) == 2)
            assert await client.call("orders.place", {"n": 1}) == {"got": {"n": 1},
                                                                   "query": []}
            await svc.stop()  # killed: the port now refuses
            # not idempotent, yet it fails over: the refused connect sent nothing
            handle = await client.submit("orders.place", {"n": 2})
            assert await handle.result(2) == {"by": "websocket"}
            tried = [(a["agent"], a["outcome"]) for a in
                     (await client.status(handle.task_id))["attempts"]]
            assert tried == [("legacy", "undelivered"), ("ws-orders", "ok")]
            # no health path: a call that could not connect makes a TCP connect the check
            await wait_until(lambda: _state(reach, "legacy") == "suspected")
            await svc.start()  # back on the same port
            await wait_until(lambda: _state(reach, "legacy") == "online")
            assert await client.call("orders.place", {"n": 3}) == {"got": {"n": 3},
                                                                   "query": []}


async def test_the_health_path_drives_online_suspected_and_back() -> None:
    async with serving() as svc, Reach.start(**FAST) as reach:
        svc.healthy = False
        view = await reach.attach(agent(svc, {"orders.lookup": {"path": "/echo"}},
                                        health="/healthz"))
        assert view["state"] == "suspected"
        svc.healthy = True
        await wait_until(lambda: _state(reach, "legacy") == "online")
        svc.healthy = False
        await wait_until(lambda: _state(reach, "legacy") == "suspected")
        svc.healthy = True
        await wait_until(lambda: _state(reach, "legacy") == "online")
        assert svc.calls("/healthz")[-1].method == "GET"


async def test_an_absent_service_starts_suspected_and_detach_releases_the_session() -> None:
    svc = Service()
    await svc.start()
    await svc.stop()  # a port nobody listens on
    async with Reach.start(**FAST) as reach:
        http = agent(svc, {"orders.lookup": {"path": "/echo"}})
        assert (await reach.attach(http))["state"] == "suspected"
        assert http.describe() == {"url": svc.url, "health": None}
        await reach.detach("legacy")
        assert http._session is None


def test_declarations_say_what_is_wrong() -> None:
    caps = {"a.run": {"path": "/a"}}
    with pytest.raises(ValueError, match="url must be an http"):
        HttpAgent("x", "ftp://h", caps)
    with pytest.raises(ValueError, match=r"capability 'a.run': path must be a URL path"):
        HttpAgent("x", "http://h", {"a.run": {"latency_ms": 5}})
    with pytest.raises(ValueError, match="method must be one of"):
        HttpAgent("x", "http://h", {"a.run": {"path": "/a", "method": "FETCH"}})
    with pytest.raises(ValueError, match="headers must be a table"):
        HttpAgent("x", "http://h", caps, headers={"X": "a\r\nInjected: 1"})
    with pytest.raises(ValueError, match="not on the service's origin"):
        HttpAgent("x", "http://h:1", openapi_url="http://elsewhere/openapi.json")
    with pytest.raises(ValueError, match="health must be a path"):
        HttpAgent("x", "http://h", caps, health="healthz")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['pth'\]"):
        HttpAgent("x", "http://h", {"a.run": {"pth": "/a"}})


async def _answer(a: Answer) -> Answer:
    return a


def _state(reach: Reach, name: str) -> str:
    return next(a["state"] for a in reach.agents() if a["name"] == name)
