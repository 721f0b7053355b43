"""Issue 25, item 1: request bodies on the REST port cannot make the coordinator inflate or
drain what it has already refused.

Before: a 260 KB gzip body that inflates to 256 MB was answered 401 (or 413) within
milliseconds, and the coordinator went on inflating it afterwards, ~2 s of CPU per MB sent,
stalling every websocket caller; a refused body was drained (up to 10 s) instead of the
connection closed. Now a body with a ``Content-Encoding`` is refused 415 before a byte of it
is read (nothing is inflated, ever), a ``Content-Length`` over ``max_frame_bytes`` is 413
before reading, and once an answer is decided with the body unread the connection is closed.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from security.conftest import StallProbe, start_probe
from security.rest_raw import answer, closed, connect, head, port_of, shut
from tracer import SLOWDOWN

from reach.testing import Cluster

TOKENS = {"t-probe": "probe-caller", "t-agent": "probe-agent"}


def gzip_bomb(megabytes: int) -> bytes:
    """A gzip body of zeros inflating to ``megabytes`` MiB, ~1 KB per MiB (made in ms: one
    full-flushed block repeated; no trailer, as an attacker needs none)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    return first + again * (megabytes - 1)


@pytest_asyncio.fixture(params=["open", "tokens"])
async def guarded(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Cluster, StallProbe]]:
    """A coordinator (open mode, or with tokens: the bomb then comes without one) and a
    legitimate websocket pair calling back to back."""
    tokens = TOKENS if request.param == "tokens" else None
    cluster = await Cluster.start(tokens=tokens)
    try:
        probe = await start_probe(cluster, agent_token=tokens and "t-agent",
                                  caller_token=tokens and "t-probe")
        yield cluster, probe
        await probe.stop()
    finally:
        await cluster.close()


async def test_a_gzip_bomb_is_refused_unread_costs_no_cpu_and_stalls_nobody(
        guarded: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = guarded
    bomb = gzip_bomb(512)  # 520 KB on the wire, 512 MiB inflated
    assert len(bomb) < 600_000
    probe.start()
    cpu = time.process_time()
    reader, writer = await connect(port_of(cluster.reach))
    try:
        writer.write(head("POST", "/v1/call/probe.echo", {
            "Content-Type": "application/json", "Content-Encoding": "gzip",
            "Content-Length": len(bomb)}) + bomb)
        status, headers, problem = await answer(reader)
        assert status == 415, (status, problem)
        assert problem["code"] == "protocol_error" and "Content-Encoding" in problem["detail"]
        assert headers["accept-encoding"] == "identity"
        # The answer is decided and the body unread: closed, not drained.
        assert await closed(reader, 1.0), "the connection was kept to drain the body"
        spent = time.process_time() - cpu
    finally:
        shut(writer)
    # Inflating 512 MiB cost this process 0.45 s of CPU (measured on main); refusing it
    # costs a few ms (the bound is generous: the probe keeps calling meanwhile).
    assert spent < 0.15 * SLOWDOWN, f"the coordinator spent {spent:.2f} s of CPU on the bomb"
    await probe.check()


async def test_every_content_encoding_but_identity_is_refused_and_identity_is_taken(
        guarded: tuple[Cluster, StallProbe]) -> None:
    cluster, _ = guarded
    auth = {"Authorization": "Bearer t-probe"} if cluster.reach.settings.tokens else {}
    port = port_of(cluster.reach)
    for encoding in ("deflate", "br", "zstd", "gzip, identity", "x-anything"):
        reader, writer = await connect(port)
        try:
            writer.write(head("POST", "/v1/call/probe.echo", {
                **auth, "Content-Encoding": encoding, "Content-Length": 2}) + b"{}")
            status, _, problem = await answer(reader)
            assert (status, problem["code"]) == (415, "protocol_error"), encoding
        finally:
            shut(writer)
    reader, writer = await connect(port)
    try:
        body = b'{"n": 7}'
        writer.write(head("POST", "/v1/call/probe.echo", {
            **auth, "Content-Encoding": "identity", "Content-Type": "application/json",
            "Content-Length": len(body)}) + body)
        status, _, result = await answer(reader)
        assert (status, result["result"]) == (200, 7)
    finally:
        shut(writer)


async def test_a_refused_body_is_not_drained_the_connection_is_closed() -> None:
    """A request refused 401 before its body was read: the coordinator closes the connection
    at once instead of reading the rest (before: up to 10 s of reading, on keep-alive)."""
    cluster = await Cluster.start(tokens=TOKENS)
    try:
        reader, writer = await connect(port_of(cluster.reach))
        try:
            writer.write(head("POST", "/v1/call/probe.echo", {
                "Content-Type": "application/json", "Content-Length": 512 * 1024})
                + b" " * 100_000)  # the rest never comes
            status, headers, problem = await answer(reader)
            assert (status, problem["code"]) == (401, "unauthorized")
            assert headers.get("connection", "").lower() == "close"
            assert await closed(reader, 1.0)
        finally:
            shut(writer)
    finally:
        await cluster.close()


async def test_a_declared_length_over_the_limit_is_413_before_any_of_it_is_read() -> None:
    cluster = await Cluster.start(max_frame_bytes=64 * 1024)
    try:
        reader, writer = await connect(port_of(cluster.reach))
        try:  # the head alone: before, the route sat waiting for the 10 MB to come
            writer.write(head("POST", "/v1/tasks", {"Content-Type": "application/json",
                                                    "Content-Length": 10 << 20}))
            status, _, problem = await answer(reader, 1.0)
            assert (status, problem["code"]) == (413, "protocol_error")
            assert "65536-byte limit" in problem["detail"]
            assert await closed(reader, 1.0)
        finally:
            shut(writer)
        reader, writer = await connect(port_of(cluster.reach))
        try:  # a chunked body over the limit: counted as it comes, refused, closed
            writer.write(head("POST", "/v1/tasks", {"Content-Type": "application/json",
                                                    "Transfer-Encoding": "chunked"})
                         + b"%x\r\n%s\r\n" % (100_000, b" " * 100_000))
            status, _, problem = await answer(reader, 1.0)
            assert (status, problem["code"]) == (413, "protocol_error")
            assert await closed(reader, 1.0)
        finally:
            shut(writer)
    finally:
        await cluster.close()
