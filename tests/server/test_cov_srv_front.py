"""The REST front door's rarer paths (reach/server/front.py): a taken port, its request limit,
the edge's answer to a bug, the late duplicate and the failed commit over HTTP, the front
door's own wait running out (504), a trace without a W3C id, and a stream joined after its
first chunks were kept."""

from __future__ import annotations

import asyncio
import logging
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from conformance.rawpeer import caller, submit
from front.conftest import Front, open_front

from reach import Reach
from reach.server import front as front_module
from reach.server.front_edge import _http_detail

PROBLEM = "application/problem+json"


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async for f in open_front():
        yield f


def taken_port() -> tuple[socket.socket, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, int(s.getsockname()[1])


async def test_a_taken_http_port_fails_the_start_and_releases_everything() -> None:
    holder, port = taken_port()
    free, ws_port = taken_port()
    free.close()
    try:
        opening: Any = Reach.start(port=ws_port, http_port=port)
        with pytest.raises(OSError):
            await opening
        reach = opening._target
        assert not reach.started and not reach._server.is_serving()
    finally:
        holder.close()
    with socket.socket() as s:  # the websocket port bound before the failure is free again
        s.bind(("127.0.0.1", ws_port))
    # and the HTTP port, once free, serves a coordinator
    async with Reach.start(http_port=port) as reach:
        assert reach.http_url == f"http://127.0.0.1:{port}"


async def test_past_max_connections_requests_in_flight_a_request_is_503() -> None:
    async for f in open_front(max_connections=2):
        # two callers: one caller alone may hold only its share, half (issue 25 item 9)
        slow = [asyncio.ensure_future(f.post("/v1/call/slow.run", {"seconds": 0.2},
                                             headers={"X-Reach-Caller": who}))
                for who in ("a", "b")]
        door: Any = f.reach.front
        async with asyncio.timeout(2):
            while door.inflight < 2:
                await asyncio.sleep(0.005)
        status, body, r = await f.post("/v1/call/echo.run", {"a": 1})
        assert status == 503 and r.headers["Content-Type"].startswith(PROBLEM)
        assert body["code"] == "unavailable" and "request limit" in body["detail"]
        assert [(await s)[0] for s in slow] == [200, 200]  # those in flight were answered
        status, body, _ = await f.post("/v1/call/echo.run", {"a": 1})  # and room again
        assert (status, body["result"]) == (200, {"echo": {"a": 1}})


async def test_a_bug_in_a_route_is_a_500_problem_and_logged(
        front: Front, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(front_module, "capabilities", broken)
    with caplog.at_level(logging.ERROR, "reach.front"):
        status, body, r = await front.get("/v1/capabilities")
    assert status == 500 and r.headers["Content-Type"].startswith(PROBLEM)
    assert body["code"] == "reach_error" and "a bug" not in body["detail"]  # no internals
    assert "its log says why" in body["detail"]
    assert any("failed on GET /v1/capabilities" in rec.getMessage() for rec in caplog.records)
    monkeypatch.undo()
    assert (await front.get("/v1/capabilities"))[0] == 200  # the front door carries on


async def test_the_edge_passes_a_redirect_and_a_reset_through(front: Front) -> None:
    """Only refusals become problems: an aiohttp redirect goes out as it is, and a peer
    that reset the connection gets no answer at all."""
    door: Any = front.reach.front
    request = make_mocked_request("GET", "/x")

    async def redirect(_r: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/elsewhere")

    async def reset(_r: web.Request) -> web.StreamResponse:
        raise ConnectionResetError

    with pytest.raises(web.HTTPFound):
        await door.edge.middleware(request, redirect)
    with pytest.raises(ConnectionResetError):
        await door.edge.middleware(request, reset)
    assert door.inflight == 0  # counted out either way


def test_an_http_error_without_its_own_words_keeps_aiohttps() -> None:
    request = make_mocked_request("GET", "/v1/tasks/x")
    assert _http_detail(request, web.HTTPConflict(text="busy"), 10) == "busy"
    assert _http_detail(request, web.HTTPConflict(), 10) == "409: Conflict"
    assert "10-byte limit" in _http_detail(request, web.HTTPRequestEntityTooLarge(10, 11), 10)


async def test_a_late_duplicate_over_http_is_read_back_or_refused(tmp_path: Path) -> None:
    async for f in open_front(recent_tasks=1, store=f"sqlite:///{tmp_path / 'r.db'}"):
        key = {"Idempotency-Key": "k-http", "X-Reach-Caller": "bob"}
        status, first, _ = await f.post("/v1/tasks", {"capability": "echo.run",
                                                     "params": {"n": 1}}, headers=key)
        assert status == 202
        tid = first["task_id"]
        assert (await f.get(f"/v1/tasks/{tid}?wait=2", headers=key))[1]["state"] == "succeeded"
        await f.post("/v1/call/echo.run", {"n": 2}, headers={"X-Reach-Caller": "bob"})
        assert f.reach.gateway.find(tid) is None  # the first task is in the store only
        status, again, _ = await f.post("/v1/tasks", {"capability": "echo.run",
                                                     "params": {"n": 1}}, headers=key)
        assert (status, again["task_id"], again["duplicate"]) == (202, tid, True)
        status, by_intent, _ = await f.post("/v1/tasks", {"intent": "echo this back",
                                                         "params": {"n": 1}}, headers=key)
        assert (status, by_intent["task_id"], by_intent["duplicate"]) == (202, tid, True)
        status, body, _ = await f.post("/v1/tasks", {"capability": "sales.query",
                                                    "params": {}}, headers=key)
        assert status == 422 and body["code"] == "invalid_params"
        assert "already used for 'echo.run'" in body["detail"]
        await f.reach.store.flush()
        with sqlite3.connect(tmp_path / "r.db") as db:  # an operator deleted the first row
            db.execute("DELETE FROM reach_tasks WHERE task_id = ?", (tid,))
        status, body, _ = await f.post("/v1/tasks", {"capability": "echo.run",
                                                    "params": {"n": 1}}, headers=key)
        assert status == 500 and body["code"] == "reach_error"
        assert body["detail"] == "the first task of this idempotency key was not found"


async def test_a_submit_the_store_cannot_commit_is_503_and_not_accepted(front: Front) -> None:
    store: Any = front.reach.store
    real = store._commit

    def broken(*_: Any) -> None:
        raise OSError("disk full")

    store._commit = broken
    try:
        status, body, _ = await front.post("/v1/tasks", {"capability": "echo.run"},
                                           headers={"Idempotency-Key": "k-disk"})
    finally:
        store._commit = real
    assert status == 503 and body["code"] == "unavailable"
    assert "task not accepted" in body["detail"] and "disk full" in body["detail"]
    status, body, _ = await front.post("/v1/tasks", {"capability": "echo.run"},
                                       headers={"Idempotency-Key": "k-disk"})
    assert status == 202 and body["duplicate"] is False  # the key was not taken


async def test_when_the_front_doors_own_wait_runs_out_it_is_504_naming_the_task(
        front: Front, monkeypatch: pytest.MonkeyPatch) -> None:
    # No grace past the call's own timeout: the front door stops waiting as the task starts.
    monkeypatch.setattr(front_module, "GRACE", -0.05)
    status, body, _ = await front.post("/v1/call/slow.run?timeout=0.05", {"seconds": 0.01})
    assert status == 504 and body["code"] == "timeout"
    tid = body["task_id"]
    assert "no outcome within 0.05s" in body["detail"]
    assert f"GET /v1/tasks/{tid}" in body["detail"]
    _, view, _ = await front.get(f"/v1/tasks/{tid}?wait=2")
    assert view["state"] == "succeeded"  # the task went on and finished


async def test_a_task_with_a_caller_chosen_trace_id_has_no_traceparent_header(
        front: Front) -> None:
    ws = await caller(front.reach.url, "bob")
    await ws.send(submit(1, "echo.run", {"x": 1}, trace_id="my-own-trace"))
    accepted = await ws.expect("accepted", id=1)
    assert accepted["trace_id"] == "my-own-trace"
    await ws.outcome(1)
    status, view, r = await front.get(f"/v1/tasks/{accepted['task_id']}",
                                      headers={"X-Reach-Caller": "bob"})
    assert status == 200 and view["state"] == "succeeded"
    assert r.headers["X-Reach-Trace-Id"] == "my-own-trace" and "traceparent" not in r.headers
    await ws.close()


async def test_a_stream_joined_after_chunks_were_kept_replays_them_once(front: Front) -> None:
    status, body, _ = await front.post("/v1/tasks", {"capability": "text.generate",
                                                    "params": {"n": 4, "pause": 0.02}})
    assert status == 202
    tid = body["task_id"]
    door: Any = front.reach.front
    async with asyncio.timeout(2):
        while door.chunks.kept(tid) < 1:  # the submit's sink has kept a chunk already
            await asyncio.sleep(0.005)
    assert front.reach.gateway.outcome(tid) is not None  # still running
    async with front.http.get(f"{front.url}/v1/tasks/{tid}/stream") as r:
        text = (await r.read()).decode()
    chunks = [line for line in text.splitlines() if line.startswith("data: {\"i\"")]
    assert chunks == [f'data: {{"i":{i}}}' for i in range(4)]  # each once, in order
    assert "event: result" in text


async def test_unknown_task_ids_are_404_for_status_and_stream(front: Front) -> None:
    nobody = "0" * 32
    for path in (f"/v1/tasks/{nobody}", f"/v1/tasks/{nobody}/stream"):
        status, body, r = await front.get(path, headers={"X-Reach-Caller": "bob"})
        assert status == 404 and r.headers["Content-Type"].startswith(PROBLEM)
        assert body["code"] == "invalid_params" and body["task_id"] == nobody
        assert f"no task with id {nobody!r} for caller 'bob'" == body["detail"]

