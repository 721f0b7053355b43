"""Hypothesis-generated frames against a live coordinator, for each role.

Hypothesis draws the frames; the coordinator runs on the test's own event loop. Driving an
async session from inside a sync ``@given`` test would need a second loop in a thread, so
instead a sync ``@given`` collector draws a fixed, derandomized batch of frames up front
(same frames every run, no example database), and the async test sends the whole batch over
one live session. What it asserts for every frame:

- the coordinator answers only with frames of documented types for the role, an ``error``
  always carrying a known code;
- it closes a connection only with a documented code (1000, 1008, 1009, 4000), never 1011;
- afterwards the legitimate probe pair still answers within the stall limit.

A frame that breaks an assertion is reported with its text, so it can be replayed by hand.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from reach import errors
from reach.testing import Cluster

StallProbe = Any  # tests/security/conftest.py's probe fixture

CODES = {cls.code for cls in (errors.ReachError, errors.NoRoute, errors.Unavailable,
                              errors.Rejected, errors.InvalidParams, errors.Unauthorized,
                              errors.TaskFailed, errors.ReachTimeout, errors.ProtocolError)}
CLOSE_CODES = {1000, 1008, 1009, 4000}
# An agent's "welcome" answers a register frame on its open connection (a registration
# update, docs/protocol.md §15); it is checked off the loop, so it may come after the sentinel.
REPLIES = {"agent": {"error", "invoke", "cancel", "welcome"},
           "caller": {"error", "accepted", "result", "chunk", "task"}}
SENTINEL = -(10**15)  # sentinel request ids, far from anything drawn
EXAMPLES = 150

REGISTER = {"v": 1, "type": "register", "name": "fuzz-agent",
            "capabilities": [{"name": "fuzz.sink", "latency_ms": 50}]}
HELLO = {"v": 1, "type": "hello", "caller": "fuzz-caller"}
VALID = [
    REGISTER, HELLO, {"type": "admin", "token": "x"},
    {"type": "heartbeat", "inflight": 1, "queue_depth": 0, "load": 0.5},
    {"type": "ack", "task_id": "t", "attempt": 1},
    {"type": "result", "task_id": "t", "attempt": 1, "result": {"a": 1}},
    {"type": "error", "task_id": "t", "attempt": 1,
     "error": {"code": "task_failed", "message": "m", "details": {}}},
    {"type": "chunk", "task_id": "t", "attempt": 1, "seq": 0, "data": "d"},
    {"type": "deregister"}, {"type": "welcome", "role": "caller"},
    {"type": "invoke", "task_id": "t", "attempt": 1, "capability": "x.get",
     "idempotency_key": "k", "trace_id": "tr"},
    {"type": "cancel", "task_id": "t", "attempt": 1},
    {"type": "submit", "id": 1, "capability": "nobody.declares", "params": {"n": 1}},
    {"type": "submit", "id": 2, "intent": "查一下销售额", "wait": False},
    {"type": "status", "id": 3, "task_id": "t"}, {"type": "result", "id": 4, "task_id": "t"},
    {"type": "accepted", "id": 5, "task_id": "t", "trace_id": "tr"},
    {"type": "task", "id": 6, "task": {}}, {"type": "command", "id": 7, "action": "trace"},
]
FIELDS = ["v", "type", "id", "task_id", "attempt", "inflight", "queue_depth", "load", "name",
          "caller", "capabilities", "capability", "timeout", "priority", "traceparent",
          "trace_id", "idempotency_key", "error", "seq", "params", "max_concurrency", "intent",
          "version", "instance", "token", "deregister"]
NAN = object()  # drawn as a bare NaN / Infinity word, which JSON lacks but peers send

_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(),
    st.sampled_from([-5, -1, 0, 2**53, 2**63, 10**30, 1e308, -1e308, 1e-320]),
    st.text(max_size=30), st.sampled_from(["", "\x1b[31m", "\x00", "a\nb", "\u202e", "查",
                                            "\ud7ff", "x" * 5000]))
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=5)
                     | st.dictionaries(st.text(max_size=10), inner, max_size=5),
                     max_leaves=25)


def _deep(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "[" else ('{"a":' * depth + "1"
                                                            + "}" * depth)


@st.composite
def frames(draw: st.DrawFn) -> str | bytes:
    how = draw(st.sampled_from(["json", "mutated", "mutated", "mutated", "text", "bytes",
                                "deep", "big", "nan"]))
    if how == "json":
        return json.dumps(draw(_json))
    if how == "text":
        return draw(st.text(max_size=200))
    if how == "bytes":
        return draw(st.binary(max_size=200))
    base = dict(draw(st.sampled_from(VALID)))
    if how == "deep":
        depth = draw(st.sampled_from([199, 201, 1000, 50_000, 300_000]))
        inner = _deep(depth, draw(st.sampled_from(["[", "{"])))
        field = draw(st.sampled_from(["params", "result", "data", "zz", "id", "type"]))
        return json.dumps(base)[:-1] + f', "{field}": {inner}}}'
    if how == "big":
        size = draw(st.sampled_from([10_000, 200_000, 900_000]))
        base[draw(st.sampled_from(FIELDS))] = "x" * size
        return json.dumps(base)
    if how == "nan":
        word = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]))
        field = draw(st.sampled_from(FIELDS))
        return json.dumps(base)[:-1] + f', "{field}": {word}}}'
    for _ in range(draw(st.integers(1, 3))):
        base[draw(st.sampled_from(FIELDS) | st.text(max_size=8))] = draw(_json)
    return json.dumps(base)  # allow_nan: float('nan') / inf go out as bare words


def draw_frames(n: int = EXAMPLES) -> list[str | bytes]:
    drawn: list[str | bytes] = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frames())
    def collect(frame: str | bytes) -> None:
        drawn.append(frame)

    collect()
    return drawn


BATCH = draw_frames()


def _show(raw: str | bytes) -> str:
    return repr(raw[:200]) + (f"... ({len(raw)} long)" if len(raw) > 200 else "")


def _check_reply(role: str, raw: str | bytes, text: str | bytes) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(text)
    assert reply["type"] in REPLIES[role], f"{role} got {reply!r} for {_show(raw)}"
    if reply["type"] == "error":
        assert reply["error"]["code"] in CODES, f"unknown code in {reply!r} for {_show(raw)}"
    return reply


def _check_close(raw: str | bytes, exc: ConnectionClosed) -> None:
    code = exc.rcvd.code if exc.rcvd is not None else None
    assert code in CLOSE_CODES, f"closed with {code} after {_show(raw)}"


async def _open(cluster: Cluster, first: dict[str, Any]) -> ClientConnection:
    ws = await websockets.connect(cluster.url, max_size=None)
    await ws.send(json.dumps(first))
    assert json.loads(await ws.recv())["type"] == "welcome"
    return ws


async def _session_fuzz(cluster: Cluster, role: str) -> int:
    """Send the batch on one session; after each frame a sentinel marks the end of its
    replies. A closed session (documented code) is reopened. Returns how many reopened."""
    first = REGISTER if role == "agent" else HELLO
    sentinel_frame = (lambda n: json.dumps({"v": 1, "type": "submit", "id": n})) \
        if role == "agent" else (lambda n: json.dumps({"v": 1, "type": "status", "id": n,
                                                       "task_id": "fuzz-sentinel"}))
    ws = await _open(cluster, first)
    reopened = 0
    try:
        for n, raw in enumerate(BATCH):
            marker = SENTINEL - n
            try:
                await ws.send(raw)
                await ws.send(sentinel_frame(marker))
                while True:
                    reply = _check_reply(role, raw, await ws.recv())
                    if reply.get("id") == marker:
                        break
            except ConnectionClosed as exc:
                _check_close(raw, exc)
                reopened += 1
                ws = await _open(cluster, first)
    finally:
        await ws.close()
    return reopened


@pytest.mark.parametrize("role", ["agent", "caller"])
async def test_fuzzed_session_frames(cluster: Cluster, probe: StallProbe, role: str) -> None:
    other = await cluster.client("bystander")
    await _session_fuzz(cluster, role)
    assert await other.call("probe.echo", {"n": 7}, timeout=5) == 7  # others unaffected
    await probe.check()


async def test_fuzzed_first_frames(cluster: Cluster, probe: StallProbe) -> None:
    for raw in BATCH:
        async with websockets.connect(cluster.url, max_size=None) as ws:
            await ws.send(raw)
            try:
                reply = json.loads(await ws.recv())
                assert reply["type"] in {"welcome", "error", "snapshot"}, \
                    f"first frame {_show(raw)} got {reply!r}"
                if reply["type"] == "error":
                    assert reply["error"]["code"] in CODES
                    await ws.recv()  # the refusal closes the connection
                    pytest.fail(f"refused {_show(raw)} without closing")
            except ConnectionClosed as exc:
                _check_close(raw, exc)
    await probe.check()


def test_the_batch_covers_what_it_claims() -> None:
    texts = [raw for raw in BATCH if isinstance(raw, str)]
    assert len(BATCH) == EXAMPLES
    assert any("NaN" in t or "Infinity" in t for t in texts)
    assert any(t.count("[") > 1000 or t.count("{") > 1000 for t in texts)
    assert any(len(t) > 100_000 for t in texts)
    assert any(isinstance(raw, bytes) for raw in BATCH)
