"""Bad input on the wire: a typed error or a clear close, and nobody else is disturbed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from reach.testing import Cluster


async def echo(**params: Any) -> dict[str, Any]:
    return params


@pytest.fixture
async def busy_cluster(reach_cluster: Cluster) -> Cluster:
    await reach_cluster.add_agent("echo", {"echo.run": echo}, idempotent=True)
    return reach_cluster


async def still_serving(cluster: Cluster) -> None:
    client = cluster.clients[0] if cluster.clients else await cluster.client()
    assert await client.call("echo.run", {"x": 1}) == {"x": 1}


async def test_garbage_first_frame_is_refused_with_a_reason(busy_cluster: Cluster) -> None:
    await still_serving(busy_cluster)
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send("{not json")
        reply = json.loads(await ws.recv())
        assert reply["type"] == "error" and reply["error"]["code"] == "protocol_error"
        assert "not valid JSON" in reply["error"]["message"]
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    await still_serving(busy_cluster)


@pytest.mark.parametrize("frame, words", [
    ({"v": 2, "type": "hello"}, "unsupported protocol version 2"),
    ({"v": 1, "type": "teleport"}, "unknown frame type 'teleport'"),
    ([1, 2, 3], "JSON object"),
    ({"v": 1, "type": "submit", "capability": "echo.run"}, "invalid 'submit' frame: id"),
    ({"v": 1, "type": "invoke", "task_id": "x"}, "not accepted from a caller"),
])
async def test_bad_frames_after_hello_get_errors_and_the_session_goes_on(
        busy_cluster: Cluster, frame: Any, words: str) -> None:
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "caller": "raw"}))
        assert json.loads(await ws.recv())["type"] == "welcome"
        if frame.__class__ is dict and frame.get("type") == "invoke":
            frame = {**frame, "capability": "a.b", "idempotency_key": "k", "trace_id": "t"}
        await ws.send(json.dumps(frame))
        reply = json.loads(await ws.recv())
        assert reply["type"] == "error" and reply["error"]["code"] == "protocol_error"
        assert words in reply["error"]["message"]
        # The same connection still works.
        await ws.send(json.dumps({"v": 1, "type": "submit", "id": 7, "capability": "echo.run",
                                  "params": {"ok": True}}))
        first = json.loads(await ws.recv())
        if first["type"] == "accepted":  # acknowledged first, answered later
            assert first["id"] == 7
            result = json.loads(await ws.recv())
            assert "trace_id" not in result
        else:  # done before its commit: one frame acknowledges and answers
            result = dict(first)
            assert result.pop("trace_id")
        assert result == {"v": 1, "type": "result", "task_id": result["task_id"],
                          "attempt": 0, "id": 7, "result": {"ok": True}}
    await still_serving(busy_cluster)


async def test_oversize_frame_closes_only_that_connection() -> None:
    cluster = await Cluster.start(max_frame_bytes=4096)
    try:
        await cluster.add_agent("echo", {"echo.run": echo})
        await still_serving(cluster)
        async with websockets.connect(cluster.url, max_size=None) as ws:
            await ws.send(json.dumps({"v": 1, "type": "hello"}))
            await ws.recv()
            await ws.send(json.dumps({"v": 1, "type": "submit", "id": 1,
                                      "capability": "echo.run", "params": {"x": "a" * 10_000}}))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        await still_serving(cluster)
    finally:
        await cluster.close()


async def test_malformed_registration_is_refused(busy_cluster: Cluster) -> None:
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "x", "capabilities": [
            {"name": "bad.schema", "params": {"type": "no-such-type"}}]}))
        reply = json.loads(await ws.recv())
        assert reply["error"]["code"] == "invalid_params"
        assert "registration refused" in reply["error"]["message"]
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "x", "capabilities": []}))
        reply = json.loads(await ws.recv())
        assert reply["error"]["code"] == "protocol_error"
        assert "capabilities" in reply["error"]["message"]
    await still_serving(busy_cluster)


async def test_agent_garbage_is_answered_and_its_work_goes_on(busy_cluster: Cluster) -> None:
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "raw-agent",
                                  "capabilities": [{"name": "raw.run"}]}))
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome" and welcome["agent_id"]
        await ws.send("garbage")
        assert json.loads(await ws.recv())["error"]["code"] == "protocol_error"
        await ws.send(json.dumps({"v": 1, "type": "submit", "id": 1, "capability": "x"}))
        reply = json.loads(await ws.recv())
        assert "not accepted from an agent" in reply["error"]["message"]
        client = await busy_cluster.client()
        handle = await client.submit("raw.run", {"n": 1})
        invoke = json.loads(await ws.recv())
        assert invoke["type"] == "invoke" and invoke["task_id"] == handle.task_id
        await ws.send(json.dumps({"v": 1, "type": "result", "task_id": invoke["task_id"],
                                  "attempt": invoke["attempt"], "result": "raw ok"}))
        assert await handle.result(3) == "raw ok"


async def test_deep_json_is_answered_on_its_id_and_the_session_goes_on(
        busy_cluster: Cluster) -> None:
    async with websockets.connect(busy_cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "caller": "deep"}))
        assert json.loads(await ws.recv())["type"] == "welcome"
        await ws.send('{"v": 1, "type": "submit", "id": 3, "capability": "echo.run", '
                      '"params": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}")
        reply = json.loads(await ws.recv())
        assert reply["id"] == 3 and reply["error"]["code"] == "protocol_error"
        assert reply["error"]["details"] == {"type": "submit"}
        await ws.send(json.dumps({"v": 1, "type": "teleport"}))
        reply = json.loads(await ws.recv())
        assert reply["error"]["details"] == {"type": "teleport"}
    await still_serving(busy_cluster)
