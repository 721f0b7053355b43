"""Hostile params schemas and params against a real coordinator on loopback.

Each test sends the attack, expects the typed refusal, and then asks the stall probe whether a
legitimate caller was slowed down meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import websockets
from conftest import StallProbe  # tests/security/conftest.py (rootdir-relative import)

from reach import Client, InvalidParams
from reach.testing import Cluster

POLICY_VIOLATION = 1008


async def register_raw(cluster: Cluster, params: dict[str, Any]) -> dict[str, Any]:
    """Register ``evil`` with one capability; return the coordinator's error frame."""
    async with websockets.connect(cluster.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "evil",
                                  "capabilities": [{"name": "x.run", "params": params}]}))
        async with asyncio.timeout(2):
            frame = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await ws.recv()
    assert frame["type"] == "error", frame
    assert frame["error"]["code"] == "invalid_params", frame
    assert closed.value.rcvd is not None and closed.value.rcvd.code == POLICY_VIOLATION
    return frame


async def run(**params: Any) -> int:
    return 1


async def test_remote_ref_never_connects(cluster: Cluster, probe: StallProbe):
    accepts = 0

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepts
        accepts += 1  # and never answer, as in the report
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for ref in (f"http://127.0.0.1:{port}/s.json", f"//127.0.0.1:{port}/s.json"):
            frame = await register_raw(cluster, {"$ref": ref})
            assert "only local '#/...' $ref are allowed" in frame["error"]["message"]
        await register_raw(cluster, {"type": "object", "properties": {
            "a": {"anyOf": [{"type": "null"}, {"$ref": f"http://127.0.0.1:{port}/x"}]}}})
        await register_raw(cluster, {"$id": f"http://127.0.0.1:{port}/", "$ref": "s.json"})
    finally:
        server.close()
        await server.wait_closed()
    assert accepts == 0
    await probe.check()


async def test_file_ref_is_refused_without_reading(cluster: Cluster, probe: StallProbe):
    frame = await register_raw(cluster, {"$ref": "file:///etc/passwd"})
    message = frame["error"]["message"]
    assert "file:///etc/passwd" in message and "root:" not in message
    await probe.check()


async def test_backreference_pattern_is_refused(cluster: Cluster, probe: StallProbe):
    frame = await register_raw(cluster, {"type": "object", "properties": {
        "s": {"type": "string", "pattern": r"^(a+)\1$"}}})
    assert "RE2 syntax" in frame["error"]["message"]
    await probe.check()


async def test_oversized_schema_is_refused(cluster: Cluster, probe: StallProbe):
    props = {f"p{i}": {"type": "string", "maxLength": 64} for i in range(400)}  # ~14 KB
    frame = await register_raw(cluster, {"type": "object", "properties": props})
    assert "over the limit" in frame["error"]["message"]
    await probe.check()


async def target(cluster: Cluster, params_schema: dict[str, Any]) -> Client:
    """Connect an agent declaring ``params_schema`` for ``x.run``; return an attacking client."""
    await cluster.add_agent("target", {"x.run": run}, params=params_schema)
    return await cluster.client("attacker")


async def refused_fast(client: Client, attack: dict[str, Any]) -> InvalidParams:
    started = time.perf_counter()
    with pytest.raises(InvalidParams) as refused:
        await client.call("x.run", attack, timeout=5)
    assert time.perf_counter() - started < 0.5
    return refused.value


async def call_fast(cluster: Cluster, params_schema: dict[str, Any],
                    attack: dict[str, Any]) -> InvalidParams:
    return await refused_fast(await target(cluster, params_schema), attack)


async def test_redos_pattern_is_linear(cluster: Cluster, probe: StallProbe):
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    client = await target(cluster, schema)
    for attack in ("a" * 31 + "!", "a" * 200_000 + "!"):
        error = await refused_fast(client, {"s": attack})
        assert "must match pattern" in str(error)
    await probe.check()


async def test_hostile_email_is_linear(cluster: Cluster, probe: StallProbe):
    schema = {"type": "object", "properties": {"e": {"type": "string", "format": "email"}}}
    await call_fast(cluster, schema, {"e": "a@" + ".a" * 200_000 + "@"})
    await probe.check()


async def test_colliding_unique_items_are_linear(cluster: Cluster, probe: StallProbe):
    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    items = [k * (2**61 - 1) for k in range(1, 20_001)]
    await call_fast(cluster, schema, {"xs": items + items[-1:]})
    await probe.check()


async def test_costly_schema_is_cut_by_the_deadline(cluster: Cluster, probe: StallProbe):
    branches = [{"type": "string", "minLength": 105 - i} for i in range(100)]
    schema = {"type": "object", "properties": {"xs": {"type": "array",
                                                      "items": {"anyOf": branches}}}}
    error = await call_fast(cluster, schema, {"xs": ["aaaaaa"] * 20_000})
    assert "too costly" in str(error)
    await probe.check()
