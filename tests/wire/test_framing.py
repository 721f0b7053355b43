"""Frames found and framed by hand (reach.wire.framing, reach.wire.inbound, reach.wire.outbox),
held to websockets' own reading and writing of the same bytes: the frames a peer sends, split
at any byte across reads, mixed with pings, fragments and bursts, reach the session whole and
in order; what websockets refuses it still refuses, with the same close code, from the
header alone; a frame we write is the frame websockets would have written."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosedError
from websockets.frames import Frame, Opcode

from reach.wire.framing import find, frame
from reach.wire.inbound import YIELD_EVERY, Inbound, read

LIMIT = 100_000  # the test server's max_size

sizes = st.one_of(st.integers(0, 300), st.sampled_from([125, 126, 127, 65535, 65536]))


def reference(opcode: Opcode, data: bytes, fin: bool = True, mask: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=mask, extensions=[])


def parsed(raw: bytes, *, mask: bool) -> Frame:
    """The frame websockets reads from ``raw``."""
    reader = bytearray(raw)

    def read_exact(n: int) -> Any:
        chunk = bytes(reader[:n])
        del reader[:n]
        return chunk
        yield  # (a generator, as websockets' reader is)

    gen = Frame.parse(read_exact, mask=mask, max_size=None, extensions=[])
    try:
        next(gen)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("a whole frame was not read at once")


@given(sizes)
def test_a_frame_written_here_is_the_frame_websockets_writes(size: int) -> None:
    data = os.urandom(size)
    assert frame(data, False) == reference(Opcode.TEXT, data, mask=False)
    masked = frame(data, True)
    assert len(masked) == len(reference(Opcode.TEXT, data)) and masked != frame(data, True) \
        or not data  # a fresh key each time
    got = parsed(masked, mask=True)
    assert (got.opcode, got.fin, got.data) == (Opcode.TEXT, True, data)


@given(st.sampled_from(list(Opcode)), st.booleans(), sizes, st.booleans())
def test_a_frame_is_found_where_websockets_reads_it(opcode: Opcode, fin: bool, size: int,
                                                   mask: bool) -> None:
    if opcode in (Opcode.CLOSE, Opcode.PING, Opcode.PONG):  # (what a control frame may be)
        fin, size = True, min(size, 125)
    data = os.urandom(size)
    raw = b"\x01\x02" + reference(opcode, data, fin, mask) + b"next"
    found = find(raw, 2)
    assert found is not None
    first, start, end, key = found
    assert first == raw[2] and raw[end:] == b"next"
    payload = raw[start:end]
    if mask:
        assert key is not None and bytes(a ^ key[i % 4] for i, a in enumerate(payload)) == data
    else:
        assert key is None and payload == data
    sized = 2 + (2 if 126 <= size < 65536 else 8 if size >= 65536 else 0)
    for cut in range(sized):  # no length is read from a part of one
        assert find(raw[:2 + cut], 2) is None
    for cut in {c for c in (sized, start - 3, start - 2, end - 3) if sized <= c < end - 2}:
        # a frame not all here is found cut short
        short = find(raw[:2 + cut], 2)
        assert short is not None and short[:3] == found[:3] and short[2] > 2 + cut


# ------------------------------------------------------------------ through a real socket

class Server(Inbound, ServerConnection):
    """A coordinator-side connection: frames handed over as they come (reach.wire.inbound)."""


class Plain(Server):
    """The same, with every frame read by websockets: what the fast path must match."""

    _fast = False


@pytest.fixture(params=[Server, Plain], ids=["found-here", "websockets-alone"])
async def server(request: pytest.FixtureRequest
                 ) -> AsyncIterator[tuple[int, asyncio.Queue[Any]]]:
    """A websocket server whose handler reads as a session does (``read``), into a queue:
    each test runs against the frames found here and against websockets reading them all."""
    async with serving(request.param) as where:
        yield where


@contextlib.asynccontextmanager
async def serving(connection: type[Server], **options: Any
                  ) -> AsyncIterator[tuple[int, asyncio.Queue[Any]]]:
    sessions: asyncio.Queue[Any] = asyncio.Queue()

    async def handler(ws: ServerConnection) -> None:
        got: list[bytes] = []
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await sessions.put((got, done))
        try:
            await read(ws, lambda m: got.append(m if isinstance(m, bytes) else m.encode()))
        except Exception as exc:
            done.set_result(exc)
        else:
            done.set_result(None)

    async with serve(handler, "127.0.0.1", 0, create_connection=connection, max_size=LIMIT,
                     compression=None, ping_interval=None, **options) as srv:
        port = srv.sockets[0].getsockname()[1]
        yield port, sessions


async def opened(port: int, tail: bytes = b"", pieces: int = 1, split: int = 0
                 ) -> tuple[Any, Any]:
    """A raw TCP client past the opening handshake (``tail``: bytes sent right behind the
    request, before the answer; ``pieces``: the request written in so many parts, 5 ms
    apart; ``split``: that many bytes of the tail written last, on their own)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade"
               f"\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
               ).encode() + tail
    last = len(request) - split
    step = -(-last // pieces)
    for at in [*range(0, last, step), last]:
        writer.write(request[at:min(at + step, last)] if at < last else request[last:])
        await writer.drain()
        await asyncio.sleep(0.005)
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    return reader, writer


async def arrived(got: list[bytes], count: int) -> None:
    """Wait (at most a second) until ``count`` messages were handed to the session."""
    for _ in range(500):
        if len(got) >= count:
            return
        await asyncio.sleep(0.002)


async def close_code(reader: Any) -> int:
    """The close code of the server's close frame (read past anything before it)."""
    data = await asyncio.wait_for(reader.read(), 5)
    at = 0
    while True:
        found = find(data, at)
        assert found is not None, data
        first, start, end, _ = found
        if first == 0x88:
            return int.from_bytes(data[start:start + 2], "big")
        at = end


messages = st.lists(st.one_of(
    st.tuples(st.just("text"), sizes),
    st.tuples(st.just("binary"), st.integers(0, 200)),
    st.tuples(st.just("ping"), st.integers(0, 125)),
    st.tuples(st.just("fragments"), st.integers(2, 4)),
), min_size=1, max_size=3 * YIELD_EVERY)


@given(messages, st.lists(st.integers(1, 4000), min_size=1, max_size=30))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
async def test_what_a_peer_sends_split_anywhere_arrives_whole_and_in_order(
        server: tuple[int, asyncio.Queue[Any]], sent: list[tuple[str, int]],
        cuts: list[int]) -> None:
    port, sessions = server
    reader, writer = await opened(port)
    try:
        await sent_whole(reader, writer, sessions, sent, cuts)
    finally:
        writer.close()


async def sent_whole(reader: Any, writer: Any, sessions: asyncio.Queue[Any],
                     sent: list[tuple[str, int]], cuts: list[int]) -> None:
    got, done = await sessions.get()
    wire, expected, pongs = b"", [], []
    for n, (kind, size) in enumerate(sent):
        if kind == "ping":
            data = os.urandom(size)
            wire += reference(Opcode.PING, data)
            pongs.append(reference(Opcode.PONG, data, mask=False))
            continue
        data = (f"{n}:é" + "x" * size).encode() if kind != "binary" else os.urandom(size)
        expected.append(data)
        if kind == "fragments":
            parts = [data[:3], *([b""] * (size - 2)), data[3:]]
            wire += reference(Opcode.TEXT, parts[0], fin=False)
            wire += b"".join(reference(Opcode.CONT, p, fin=False) for p in parts[1:-1])
            wire += reference(Opcode.CONT, parts[-1])
        else:
            wire += reference(Opcode.TEXT if kind == "text" else Opcode.BINARY, data)
    at = 0
    while at < len(wire):
        for cut in cuts:
            writer.write(wire[at:at + cut])
            await writer.drain()
            await asyncio.sleep(0)  # (each piece may arrive in a read of its own)
            at += cut
    await arrived(got, len(expected))
    assert got == expected
    want = b"".join(pongs)
    answered = await asyncio.wait_for(reader.readexactly(len(want)), 5) if want else b""
    assert answered == want  # every ping answered, in order
    writer.write(reference(Opcode.CLOSE, (1000).to_bytes(2, "big")))
    assert await close_code(reader) == 1000
    writer.close()
    assert await asyncio.wait_for(done, 5) is None


@pytest.mark.parametrize(("raw", "code"), [
    (bytes((0x81, 0xFF)) + (LIMIT + 1).to_bytes(8, "big"), 1009),  # past max_size: header only
    (reference(Opcode.TEXT, b'{"v":1}', mask=False), 1002),  # a client's frame unmasked
    (bytes((0xC1,)) + reference(Opcode.TEXT, b"{}")[1:], 1002),  # a reserved bit set
    (reference(Opcode.CONT, b"{}"), 1002),  # a continuation of nothing
    (bytes((0x89,)) + reference(Opcode.TEXT, b"x" * 126)[1:], 1002),  # a ping too long
])
async def test_what_websockets_refuses_is_refused_as_websockets_would(
        server: tuple[int, asyncio.Queue[Any]], raw: bytes, code: int) -> None:
    port, sessions = server
    reader, writer = await opened(port)
    got, _ = await sessions.get()
    writer.write(reference(Opcode.TEXT, b"first") + raw)
    assert await close_code(reader) == code
    assert got == [b"first"]
    writer.close()


async def test_frames_sent_before_the_handshake_was_answered_are_read_in_order(
        server: tuple[int, asyncio.Queue[Any]]) -> None:
    """A client may not send frames before the server's answer; one that does has them
    read by websockets, as without this module, and so is the rest of its connection, in
    order. (A frame cut across the answer websockets itself reads wrong.)"""
    port, sessions = server
    early = reference(Opcode.TEXT, b"early-1") + reference(Opcode.TEXT, b"early-2")
    reader, writer = await opened(port, tail=early)
    got, _ = await sessions.get()
    writer.write(reference(Opcode.TEXT, b"later"))
    await arrived(got, 3)
    assert got == [b"early-1", b"early-2", b"later"]
    writer.close()


async def test_frames_sent_while_the_handshake_is_still_being_answered_are_read_in_order(
        ) -> None:
    """The same with the head and the early frames in reads of their own, while the server
    takes its time to answer."""

    async def slow(connection: Any, request: Any) -> None:
        await asyncio.sleep(0.1)

    async with serving(Server, process_request=slow) as (port, sessions):
        early = reference(Opcode.TEXT, b"early")
        reader, writer = await opened(port, tail=early, pieces=20, split=len(early))
        got, _ = await sessions.get()
        writer.write(reference(Opcode.TEXT, b"later"))
        await arrived(got, 2)
        assert got == [b"early", b"later"]
        writer.close()


async def test_frames_dribbled_in_a_byte_at_a_time_arrive_whole(
        server: tuple[int, asyncio.Queue[Any]]) -> None:
    port, sessions = server
    reader, writer = await opened(port)
    got, _ = await sessions.get()
    sent = [b"a", b"b" * 200, b"c" * 70_000]  # each length's form: 7, 16 and 64 bits
    wire = b"".join(reference(Opcode.TEXT, m) for m in sent)
    for at in range(0, 40):  # the headers byte by byte, then the rest
        writer.write(wire[at:at + 1])
        await writer.drain()
        await asyncio.sleep(0)
    writer.write(wire[40:])
    await arrived(got, 3)
    assert got == sent
    writer.close()


async def test_a_stream_cut_mid_frame_ends_the_session_as_websockets_would(
        server: tuple[int, asyncio.Queue[Any]]) -> None:
    port, sessions = server
    reader, writer = await opened(port)
    got, done = await sessions.get()
    writer.write(reference(Opcode.TEXT, b"whole") + reference(Opcode.TEXT, b"cut short")[:6])
    await writer.drain()
    await asyncio.sleep(0.01)
    writer.write_eof()
    error = await asyncio.wait_for(done, 5)
    assert got == [b"whole"]
    assert isinstance(error, ConnectionClosedError) and error.rcvd is None  # no close frame
    writer.close()
