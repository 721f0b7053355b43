"""Streams over HTTP: a streaming capability's chunks as server-sent events, then exactly one
final ``result`` or ``error`` event."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from front.conftest import Front

from reach.server.front_sse import Chunks
from reach.testing import wait_until


async def read_events(response: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """Parse a text/event-stream body into [{event, id, data}] (data decoded as JSON)."""
    events, current = [], {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if current:
                events.append(current)
                current = {}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(": ")
        current[field] = json.loads(value) if field == "data" else value
    return events


async def stream(front: Front, path: str, **kw: Any) -> tuple[aiohttp.ClientResponse,
                                                              list[dict[str, Any]]]:
    async with front.http.get(front.url + path, **kw) as r:
        return r, await read_events(r)


async def submit(front: Front, body: dict[str, Any]) -> dict[str, Any]:
    status, accepted, _ = await front.post("/v1/tasks", body)
    assert status == 202, accepted  # the problem the door answered, if it did not accept
    return accepted


async def test_submit_then_stream_gets_every_chunk_from_the_first(front: Front) -> None:
    accepted = await submit(front, {"capability": "text.generate",
                                                    "params": {"n": 4}})
    # The stream is over before anyone reads it: the kept chunks are all there is.
    await wait_until(lambda: front.reach.gateway.find(accepted["task_id"]).terminal)
    r, events = await stream(front, accepted["stream_url"])
    assert r.headers["Content-Type"] == "text/event-stream"
    assert [e["event"] for e in events] == ["chunk"] * 4 + ["result"]
    assert [e["id"] for e in events[:4]] == ["0", "1", "2", "3"]
    assert [e["data"] for e in events[:4]] == [{"i": i} for i in range(4)]
    assert events[-1]["data"]["task_id"] == accepted["task_id"]


async def test_a_stream_is_followed_live(front: Front) -> None:
    accepted = await submit(front, {"capability": "text.generate",
                                                    "params": {"n": 3, "pause": 0.05}})
    r, events = await stream(front, accepted["stream_url"])
    assert [e.get("id") for e in events] == ["0", "1", "2", None]
    # Two readers of one task each get the whole stream.
    r2, again = await stream(front, accepted["stream_url"])
    assert [e["event"] for e in again] == ["chunk"] * 3 + ["result"]


async def test_call_with_accept_event_stream_streams_directly(front: Front) -> None:
    async with front.http.post(front.url + "/v1/call/text.generate",
                               data=json.dumps({"n": 2}),
                               headers={"Accept": "text/event-stream"}) as r:
        events = await read_events(r)
    assert [e["event"] for e in events] == ["chunk", "chunk", "result"]
    assert r.headers["X-Reach-Task-Id"] == events[-1]["data"]["task_id"]


async def test_a_stream_that_fails_ends_with_an_error_event(front: Front) -> None:
    accepted = await submit(front, {"capability": "text.generate",
                                                    "params": {"n": 2, "fail": True}})
    _, events = await stream(front, accepted["stream_url"])
    assert [e["event"] for e in events] == ["chunk", "chunk", "error"]
    problem = events[-1]["data"]
    assert problem["code"] == "task_failed" and problem["status"] == 422
    assert "ran out of words" in problem["detail"]


async def test_a_non_streaming_task_streams_just_its_result(front: Front) -> None:
    accepted = await submit(front, {"capability": "echo.run",
                                                    "params": {"a": 1}})
    _, events = await stream(front, accepted["stream_url"])
    assert [(e["event"], e["data"].get("result")) for e in events] == [
        ("result", {"echo": {"a": 1}})]


def test_kept_chunks_are_bounded_per_task_and_in_total() -> None:
    chunks = Chunks(per_task=100, total=250, max_logs=10)
    for seq in range(20):
        chunks.sink("a", seq, "x" * 20)  # 22 bytes as JSON each
    assert chunks.kept("a") == 4  # the newest within 100 bytes
    chunks.sink("a", 3, "dup")  # an older seq (a second sink's copy) is not kept twice
    assert chunks.kept("a") == 4
    chunks.finished("a")
    for task in "bcdefg":
        chunks.sink(task, 0, "y" * 60)
    assert not chunks.has("a")  # finished and unread: the first to go
    assert sum(chunks.kept(t) for t in "bcdefg") * 62 <= 250
    reader = chunks.follow("g")
    assert [seq for seq, _ in reader.take()] == [0]


async def test_a_reader_that_leaves_mid_stream_costs_nothing(
        front: Front, caplog: pytest.LogCaptureFixture) -> None:
    accepted = await submit(front, {"capability": "text.generate",
                                                    "params": {"n": 20, "pause": 0.01}})
    r = await front.http.get(front.url + accepted["stream_url"])
    await r.content.readline()
    r.close()  # gone mid-stream
    _, view, _ = await front.get(f"/v1/tasks/{accepted['task_id']}?wait=5")
    assert view["state"] == "succeeded" and len(view["result"]) == 20
    door = front.reach.front
    assert door is not None
    await wait_until(lambda: door.inflight == 0)
    assert [rec for rec in caplog.records if rec.levelname == "ERROR"] == []
    _, events = await stream(front, accepted["stream_url"])  # a new reader still gets it all
    assert len(events) == 21
