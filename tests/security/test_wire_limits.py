"""Bounded frames against a live coordinator: deep JSON, out-of-range numbers, unsafe names.

Each attack gets its typed ``protocol_error`` (the session goes on, or the first frame is
refused with 1008), and the legitimate pair keeps answering within the stall limit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from reach.testing import Cluster
from reach.wire import protocol as p

StallProbe = Any  # tests/security/conftest.py's probe fixture

REGISTER = {"v": 1, "type": "register", "name": "limits-agent",
            "capabilities": [{"name": "limits.sink"}]}


async def _reply(ws: ClientConnection) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(await ws.recv())
    return reply


async def _session(cluster: Cluster, first: dict[str, Any]) -> ClientConnection:
    ws = await websockets.connect(cluster.url, max_size=None)
    await ws.send(json.dumps(first))
    assert (await _reply(ws))["type"] == "welcome"
    return ws


async def _refused(cluster: Cluster, raw: str) -> dict[str, Any]:
    """Send ``raw`` as a first frame; return the error, having seen the 1008 close."""
    async with websockets.connect(cluster.url) as ws:
        await ws.send(raw)
        reply = await _reply(ws)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert reply["type"] == "error" and reply["error"]["code"] == "protocol_error"
    error: dict[str, Any] = reply["error"]
    return error


def _deep_submit(depth: int, req_id: int) -> str:
    head = f'{{"v": 1, "type": "submit", "id": {req_id}, "capability": "probe.echo", '
    return head + '"params": {"n": ' + "[" * depth + "]" * depth + "}}"


# ---------------------------------------------------------------- 1. nesting depth

@pytest.mark.parametrize("depth", [p.MAX_DEPTH + 1, 1000, 100_000, (1 << 20) // 2 - 100])
async def test_deep_json_from_a_caller_is_answered_on_its_id(
        cluster: Cluster, probe: StallProbe, depth: int) -> None:
    ws = await _session(cluster, {"v": 1, "type": "hello", "caller": "deep"})
    try:
        raw = _deep_submit(depth, 41)
        assert len(raw.encode()) <= 1 << 20
        await ws.send(raw)
        reply = await _reply(ws)
        assert reply["type"] == "error" and reply["id"] == 41
        assert reply["error"]["code"] == "protocol_error"
        assert "nests JSON more than 200 levels deep" in reply["error"]["message"]
        assert reply["error"]["details"]["type"] == "submit"
        # The same session still works.
        await ws.send(json.dumps({"v": 1, "type": "status", "id": 42, "task_id": "nope"}))
        assert (await _reply(ws))["id"] == 42
    finally:
        await ws.close()
    await probe.check()


@pytest.mark.parametrize("raw", ["[" * 500_000 + "]" * 500_000, '{"a":' * 200_000,
                                 '{"type": "heartbeat", "x": ' + "{\"a\":" * 150_000],
                         ids=["list", "objects", "heartbeat"])
async def test_deep_json_from_an_agent_is_answered_and_the_agent_stays(
        cluster: Cluster, probe: StallProbe, raw: str) -> None:
    ws = await _session(cluster, REGISTER)
    try:
        for _ in range(3):  # one per frame, and the session goes on every time
            await ws.send(raw)
            reply = await _reply(ws)
            assert reply["type"] == "error" and reply["error"]["code"] == "protocol_error"
        await ws.send(json.dumps({"v": 1, "type": "heartbeat"}))
        await ws.send("garbage")
        assert "not valid JSON" in (await _reply(ws))["error"]["message"]
    finally:
        await ws.close()
    await probe.check()


async def test_a_deep_first_frame_is_refused_with_1008(cluster: Cluster,
                                                        probe: StallProbe) -> None:
    error = await _refused(cluster, '{"v": 1, "type": "hello", "caller": ' + "[" * 300_000)
    assert "nests JSON more than 200 levels deep" in error["message"]
    assert error["details"]["type"] == "hello"
    await probe.check()


# ---------------------------------------------------------------- 2. numbers

@pytest.mark.parametrize("fields", [
    '"inflight": -5', '"load": 1e308', '"load": NaN', '"load": Infinity', '"load": -1',
    '"queue_depth": 99999999999', '"inflight": 1e400',
])
async def test_out_of_range_heartbeats_are_refused(cluster: Cluster, probe: StallProbe,
                                                   fields: str) -> None:
    ws = await _session(cluster, REGISTER)
    try:
        await ws.send('{"v": 1, "type": "heartbeat", ' + fields + "}")
        reply = await _reply(ws)
        assert reply["error"]["code"] == "protocol_error"
        assert reply["error"]["message"].startswith("invalid 'heartbeat' frame: ")
        assert reply["error"]["details"]["type"] == "heartbeat"
        record = cluster.reach.registry.by_id[cluster.reach.identity("limits-agent")]
        assert record.reported_inflight >= 0 and 0 <= record.load <= p.MAX_LOAD
    finally:
        await ws.close()
    await probe.check()


@pytest.mark.parametrize(("fields", "field"), [
    ('"timeout": Infinity', "timeout"), ('"timeout": NaN', "timeout"),
    ('"timeout": 1e999', "timeout"), ('"timeout": -1', "timeout"),
    ('"priority": 99', "priority"), ('"max_retries": -1', "max_retries"),
])
async def test_out_of_range_submits_are_refused_on_their_id(
        cluster: Cluster, probe: StallProbe, fields: str, field: str) -> None:
    ws = await _session(cluster, {"v": 1, "type": "hello", "caller": "numbers"})
    try:
        await ws.send('{"v": 1, "type": "submit", "id": 5, "capability": "probe.echo", '
                      '"params": {"n": 1}, ' + fields + "}")
        reply = await _reply(ws)
        assert reply["id"] == 5 and reply["error"]["code"] == "protocol_error"
        assert reply["error"]["details"] == {"type": "submit", "field": field}
    finally:
        await ws.close()
    await probe.check()


# ---------------------------------------------------------------- 3. names

@pytest.mark.parametrize("bad", ["\x1b[2J", "\x00", "\n2026-01-01 INFO forged", "\u202e",
                                 "\u2028", "\u200b"])
async def test_unsafe_agent_and_capability_names_are_refused(cluster: Cluster,
                                                             probe: StallProbe,
                                                             bad: str) -> None:
    error = await _refused(cluster, json.dumps({**REGISTER, "name": f"evil{bad}"}))
    assert error["message"].startswith(
        "invalid 'register' frame: name: must not contain control characters")
    assert error["details"] == {"type": "register", "field": "name"}
    error = await _refused(cluster, json.dumps(
        {**REGISTER, "capabilities": [{"name": f"x{bad}.get"}]}))
    assert error["details"]["field"] == "capabilities.0.name"
    error = await _refused(cluster, json.dumps({"v": 1, "type": "hello",
                                                "caller": f"c{bad}"}))
    assert error["details"]["field"] == "caller"
    assert all(bad not in agent.name for agent in cluster.reach.registry.by_id.values())
    await probe.check()


async def test_unsafe_submit_fields_are_refused_on_their_id(cluster: Cluster,
                                                            probe: StallProbe) -> None:
    ws = await _session(cluster, {"v": 1, "type": "hello", "caller": "fields"})
    try:
        for n, (field, value) in enumerate([
                ("idempotency_key", "k\x1b"), ("trace_id", "t\n"),
                ("traceparent", "00-abc-def-01"), ("capability", "probe\u202e.echo"),
                ("intent", "find\x1bme")]):
            await ws.send(json.dumps({"v": 1, "type": "submit", "id": 100 + n,
                                      "capability": "probe.echo", "params": {"n": 1},
                                      field: value}))
            reply = await _reply(ws)
            assert reply["id"] == 100 + n and reply["error"]["code"] == "protocol_error"
            assert reply["error"]["details"] == {"type": "submit", "field": field}
    finally:
        await ws.close()
    await probe.check()


async def test_chinese_intents_still_register_and_route(cluster: Cluster,
                                                        probe: StallProbe) -> None:
    ws = await _session(cluster, {**REGISTER, "capabilities": [{
        "name": "sales.query", "intents": ["查一下销售额"],
        "description": "季度销售额\n按区域"}]})
    await ws.close()
    await probe.check()


async def test_agent_error_messages_with_escapes_are_cleaned_not_lost(
        cluster: Cluster, probe: StallProbe) -> None:
    ws = await _session(cluster, REGISTER)
    try:
        client = await cluster.client("cleaned")
        handle = await client.submit("limits.sink", {})
        invoke = await _reply(ws)
        assert invoke["type"] == "invoke"
        await ws.send(json.dumps({"v": 1, "type": "error", "task_id": invoke["task_id"],
                                  "attempt": invoke["attempt"], "error": {
                                      "code": "task_failed", "message": "bad\x1b[31m\r\nred",
                                      "details": {"answer": True}}}))
        with pytest.raises(Exception) as failed:
            await handle.result(3)
        assert "bad\\u001b[31m\\u000d\nred" in str(failed.value)
    finally:
        await ws.close()
    await probe.check()


# ---------------------------------------------------------------- 4. details

async def test_unknown_frame_types_name_the_type_in_details(cluster: Cluster,
                                                            probe: StallProbe) -> None:
    ws = await _session(cluster, {"v": 1, "type": "hello", "caller": "details"})
    try:
        await ws.send(json.dumps({"v": 1, "type": "teleport", "id": 3}))
        reply = await _reply(ws)
        assert reply["id"] == 3 and reply["error"]["details"] == {"type": "teleport"}
        await ws.send(json.dumps({"v": 2, "type": "status", "id": 4, "task_id": "t"}))
        reply = await _reply(ws)
        assert reply["error"]["details"] == {"supported": [1], "type": "status"}
    finally:
        await ws.close()
    await probe.check()


async def test_a_refusal_echoing_non_ascii_input_still_closes_with_1008(
        cluster: Cluster, probe: StallProbe) -> None:
    # The close reason is cut at 120 characters, and may be 123 bytes at most: the echo of
    # a bad value is ASCII, so 4-byte characters cannot push it over (it was a 1011).
    for first in ({"v": "\U00061fdb" * 200, "type": "hello"}, {"type": "é" * 300},
                  {"v": [["𢯦"] * 50], "type": "register"}):
        error = await _refused(cluster, json.dumps(first, ensure_ascii=False))
        assert error["message"].isascii()
    await probe.check()
