"""Every error the front door answers: its HTTP status, Reach's stable code, and an
``application/problem+json`` body (RFC 9457). Bad input never hurts the coordinator: after
each, a good call still answers."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from front.conftest import Front, open_front

from reach import Agent

PROBLEM = "application/problem+json"


def is_problem(r: aiohttp.ClientResponse, body: dict[str, Any], status: int, code: str) -> None:
    assert r.status == status, body
    assert r.headers["Content-Type"].startswith(PROBLEM)
    assert body["status"] == status and body["code"] == code
    assert body["type"] == f"https://agent-reach.dev/problems/{code}"
    assert body["title"] and body["detail"]


async def still_fine(front: Front) -> None:
    status, body, _ = await front.post("/v1/call/echo.run", {"ok": 1})
    assert (status, body["result"]) == (200, {"echo": {"ok": 1}})


async def test_no_route_is_404_with_suggestions(front: Front) -> None:
    status, body, r = await front.post("/v1/call/echo.runn", {})
    is_problem(r, body, 404, "no_route")
    assert "echo.run" in body["suggestions"]
    _, body, r = await front.post("/v1/intent", {"intent": "zzqx vvbn"})
    is_problem(r, body, 404, "no_route")


async def test_params_refused_by_the_schema_are_422_invalid_params(front: Front) -> None:
    status, body, r = await front.post("/v1/call/sales.query", {"region": "east"})
    is_problem(r, body, 422, "invalid_params")
    assert "quarter" in body["detail"]
    await still_fine(front)


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null"])
async def test_params_that_are_not_an_object_are_422(front: Front, raw: bytes) -> None:
    status, body, r = await front.post("/v1/call/echo.run", raw=raw)
    is_problem(r, body, 422, "invalid_params")
    assert "JSON object" in body["detail"]


@pytest.mark.parametrize("raw", [b"{bad", b'{"a": NaN}', b"\xff\xfe", b"[" * 300 + b"]" * 300])
async def test_malformed_json_is_400_protocol_error(front: Front, raw: bytes) -> None:
    status, body, r = await front.post("/v1/call/echo.run", raw=raw)
    is_problem(r, body, 400, "protocol_error")
    assert "not JSON" in body["detail"]
    await still_fine(front)


async def test_a_body_over_max_frame_bytes_is_413(front: Front) -> None:
    limit = front.reach.settings.max_frame_bytes
    raw = b'{"x": "' + b"a" * limit + b'"}'
    async with front.http.post(front.url + "/v1/call/echo.run", data=io.BytesIO(raw)) as r:
        body = await r.json(content_type=None)
    is_problem(r, body, 413, "protocol_error")
    assert str(limit) in body["detail"]

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536

    async with front.http.post(front.url + "/v1/tasks", data=chunked()) as r:
        body = await r.json(content_type=None)
    is_problem(r, body, 413, "protocol_error")
    await still_fine(front)


async def test_submit_bodies_are_checked_field_by_field(front: Front) -> None:
    for bad, field in [({"capability": "echo.run", "priority": 12}, "priority"),
                       ({"capability": "echo.run", "timeout": -1}, "timeout"),
                       ({"capability": "echo.run", "paramz": {}}, "paramz"),
                       ({"capability": "echo.run", "params": [1]}, "params")]:
        _, body, r = await front.post("/v1/tasks", bad)
        is_problem(r, body, 422, "invalid_params")
        assert field in body["detail"]
    _, body, r = await front.post("/v1/tasks", {"params": {}})  # neither capability nor intent
    is_problem(r, body, 422, "invalid_params")


async def test_bad_query_and_headers_are_422(front: Front) -> None:
    _, body, r = await front.post("/v1/call/echo.run?timeout=soon", {})
    is_problem(r, body, 422, "invalid_params")
    _, body, r = await front.post("/v1/call/echo.run", {}, headers={"traceparent": "nope"})
    is_problem(r, body, 422, "invalid_params")
    assert "traceparent" in body["detail"]


async def test_unknown_routes_and_methods_are_problems_too(front: Front) -> None:
    _, body, r = await front.get("/v2/whatever")
    is_problem(r, body, 404, "protocol_error")
    _, body, r = await front.get("/v1/call/echo.run")
    is_problem(r, body, 405, "protocol_error")
    assert "POST" in r.headers["Allow"]


async def test_unknown_task_is_404(front: Front) -> None:
    _, body, r = await front.get("/v1/tasks/" + "0" * 32)
    is_problem(r, body, 404, "invalid_params")
    _, body, r = await front.get("/v1/tasks/" + "0" * 32 + "/stream")
    is_problem(r, body, 404, "invalid_params")


async def test_a_deliberate_answer_is_422_task_failed_and_a_fault_is_502(front: Front) -> None:
    _, body, r = await front.post("/v1/call/refuse.run", {"order": "A-1"})
    is_problem(r, body, 422, "task_failed")
    assert body["details"]["answer"] is True and "A-1" in body["detail"]
    assert body["task_id"] and r.headers["X-Reach-Task-Id"] == body["task_id"]
    _, body, r = await front.post("/v1/call/boom.run", {})
    is_problem(r, body, 502, "task_failed")
    assert "crashed" in body["detail"]
    assert front.reach.dead_letter(body["task_id"]) is not None  # kept whole, replayable


async def test_timeout_is_504_and_the_task_can_be_asked_about(front: Front) -> None:
    _, body, r = await front.post("/v1/call/slow.run?timeout=0.1", {"seconds": 0.6})
    is_problem(r, body, 504, "timeout")
    status, view, _ = await front.get(f"/v1/tasks/{body['task_id']}")
    assert status == 200 and view["error"]["code"] == "timeout"
    # The header says the same as the query.
    _, body, r = await front.post("/v1/call/slow.run", {"seconds": 0.6},
                                  headers={"X-Reach-Timeout": "0.1"})
    is_problem(r, body, 504, "timeout")


async def test_declared_but_offline_is_503_with_retry_after(front: Front) -> None:
    await front.agent.close(drain=0.5)
    _, body, r = await front.post("/v1/call/echo.run", {})
    is_problem(r, body, 503, "unavailable")
    assert r.headers["Retry-After"] == "1"


async def test_past_the_callers_task_limit_is_429_with_retry_after() -> None:
    # The first task is held open until the second was answered (a 0.3 s sleep was over
    # before the second call on a slow host, which then succeeded).
    async for front in open_front(max_caller_tasks=1):
        started, release = asyncio.Event(), asyncio.Event()
        holder = Agent("holder", reconnect_base=0.02)

        @holder.capability("hold.run", latency_ms=60_000)
        async def hold() -> dict[str, bool]:
            started.set()
            await release.wait()
            return {"held": True}

        await holder.connect(front.reach.url)
        try:
            slow = asyncio.ensure_future(front.post("/v1/call/hold.run", {}))
            await asyncio.wait_for(started.wait(), 5)
            _, body, r = await front.post("/v1/call/echo.run", {})
            is_problem(r, body, 429, "rejected")
            assert r.headers["Retry-After"] == "1" and "max_caller_tasks" in body["detail"]
            release.set()
            assert (await slow)[0] == 200
        finally:
            release.set()
            await holder.close()


async def test_a_stopping_coordinator_answers_503() -> None:
    async for front in open_front():
        front.reach.gateway.accepting = False  # what stop() sets first
        _, body, r = await front.post("/v1/call/echo.run", {})
        is_problem(r, body, 503, "unavailable")
        status, health, _ = await front.get("/healthz")
        assert (status, health["status"]) == (503, "stopping")
        front.reach.gateway.accepting = True


async def test_a_call_waiting_when_the_coordinator_stops_gets_503_not_a_hang() -> None:
    async for front in open_front(drain_timeout=0.1):
        call = asyncio.ensure_future(front.post("/v1/call/slow.run", {"seconds": 5}))
        async with front.http.post(front.url + "/v1/tasks", json={
                "capability": "text.generate", "params": {"n": 100, "pause": 0.05},
                "timeout": 30}) as r:  # (not its 0.6 s, which a slow host's stream outlives)
            accepted = await r.json()
        async with front.http.get(front.url + accepted["stream_url"]) as stream:
            await stream.content.readline()  # the stream has begun
            loop = asyncio.get_running_loop()
            started = loop.time()
            stopping = asyncio.ensure_future(front.reach.stop())
            status, body, r = await call
            tail = (await stream.content.read()).decode()
            await stopping
        is_problem(r, body, 503, "unavailable")
        assert "event: error" in tail and '"code":"unavailable"' in tail
        assert loop.time() - started < 2.0
