"""The outbox on real loopback websockets whose peer stops reading: frames that meet a
congested socket are queued and written together in one batch, in order; past ``limit`` the
connection is closed as a slow reader (1008) and what waited is dropped; ``aclose`` never
swallows its caller's own cancellation."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from reach.wire.outbox import SLOW_READER, Outbox

BIG = "x" * (256 * 1024)  # far past what the small socket buffers below hold
FILL = ["fill-1", "fill-2"]


@dataclass
class Peer:
    """A server that reads nothing until ``go`` is set, then everything until the close."""

    go: asyncio.Event = field(default_factory=asyncio.Event)
    got: list[str] = field(default_factory=list)
    closed: asyncio.Future[tuple[int | None, str | None]] | None = None

    async def handler(self, ws: ServerConnection) -> None:
        await self.go.wait()
        try:
            async for message in ws:
                assert isinstance(message, str)
                self.got.append(message)
        except ConnectionClosed:
            pass
        assert self.closed is not None
        if not self.closed.done():
            self.closed.set_result((ws.close_code, ws.close_reason))


@pytest.fixture
async def congested() -> AsyncIterator[tuple[Peer, ClientConnection]]:
    """A client connection whose server does not read: small kernel buffers on both ends, and
    a server receive queue of one frame, already over it with two frames (``FILL``), so the
    server has stopped reading and the client's writes back up at once."""
    peer = Peer()
    peer.closed = asyncio.get_running_loop().create_future()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    async with serve(peer.handler, sock=listener, max_queue=1, max_size=None):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        async with connect(f"ws://127.0.0.1:{port}", sock=sock, max_size=None,
                           compression=None) as ws:
            for fill in FILL:
                await ws.send(fill)
            await asyncio.sleep(0.02)  # the server queues them and stops reading
            yield peer, ws
            peer.go.set()


def count_writes(ws: ClientConnection) -> list[int]:
    """Record the size of each write to the client's transport."""
    sizes: list[int] = []
    transport: Any = ws.transport
    write = transport.write

    def recording(data: bytes) -> None:
        sizes.append(len(data))
        write(data)

    transport.write = recording
    return sizes


async def test_frames_meeting_a_congested_socket_are_sent_in_one_write_in_order(
        congested: tuple[Peer, ClientConnection]) -> None:
    peer, ws = congested
    out = Outbox(ws, name="test-out")
    try:
        assert out.post(BIG)  # written at once: the socket took it (into its buffer)
        assert ws.transport.get_write_buffer_size() >= Outbox.EAGER_LIMIT
        writes = count_writes(ws)
        small = [f"m{i}" for i in range(20)]
        for text in small:
            assert out.post(text)
        assert len(out._queue) == 20 and writes == []  # congested: queued, nothing written
        await asyncio.sleep(0)  # the writer task takes them all
        await asyncio.sleep(0)
        assert len(out._queue) == 0 and out._queued == 0
        assert len(writes) == 1  # twenty frames, one write
        peer.go.set()  # the peer reads again
        async with asyncio.timeout(5):
            while len(peer.got) < 23:
                await asyncio.sleep(0.005)
        assert peer.got == [*FILL, BIG, *small]
        assert out.post("after") and not out.closed  # and the socket is writable again
    finally:
        await out.aclose()


async def test_a_single_queued_frame_goes_out_through_the_connection(
        congested: tuple[Peer, ClientConnection]) -> None:
    peer, ws = congested
    out = Outbox(ws, name="test-out")
    try:
        out.post(BIG)
        assert out.post("one") and len(out._queue) == 1
        await asyncio.sleep(0)
        assert len(out._queue) == 0  # taken by the writer, which waits for the socket
        peer.go.set()
        async with asyncio.timeout(5):
            while len(peer.got) < 4:
                await asyncio.sleep(0.005)
        assert peer.got == [*FILL, BIG, "one"]
    finally:
        await out.aclose()


async def test_past_the_limit_a_slow_reader_is_closed_and_its_frames_dropped(
        congested: tuple[Peer, ClientConnection], caplog: pytest.LogCaptureFixture) -> None:
    peer, ws = congested
    out = Outbox(ws, name="test-out", limit=10_000)
    assert out.post(BIG)  # taken by the socket's buffer: not counted against the limit
    assert out.post("a" * 6_000)  # queued: 6,000 bytes wait
    assert not out.post("b" * 6_000)  # 12,000 > 10,000: the connection goes
    assert out.closed and out.overflowed and out._queued == 0 and not out._queue
    assert not out.post("c")  # closed: refused
    assert any("slow reader" in r.getMessage() for r in caplog.records)
    peer.go.set()
    assert peer.closed is not None
    async with asyncio.timeout(5):
        code, reason = await peer.closed
    assert code == SLOW_READER and reason is not None and reason.startswith("slow reader")
    assert peer.got == [*FILL, BIG]  # what was queued never left
    async with asyncio.timeout(5):
        await ws.wait_closed()
    # Once the connection ended, the delayed drop and websockets' own close find nothing to
    # do (on Python 3.11 a transport closed with data buffered made both raise).
    out._abort()
    await ws.close()
    await out.aclose()


async def test_a_slow_reader_that_never_reads_on_is_dropped_after_abort_after(
        congested: tuple[Peer, ClientConnection], monkeypatch: pytest.MonkeyPatch) -> None:
    _, ws = congested
    monkeypatch.setattr(Outbox, "ABORT_AFTER", 0.02)
    out = Outbox(ws, name="test-out", limit=1_000)
    out.post(BIG)
    assert not out.post("a" * 2_000)
    assert not ws.connection_lost_waiter.done()  # the close frame waits behind BIG
    async with asyncio.timeout(5):
        await ws.connection_lost_waiter  # dropped: the peer never read its way to it
    assert ws.transport.is_closing()
    await out.aclose()


async def test_aclose_does_not_swallow_its_callers_cancellation(
        congested: tuple[Peer, ClientConnection]) -> None:
    _, ws = congested
    out = Outbox(ws, name="test-out")
    closing = asyncio.ensure_future(out.aclose())
    await asyncio.sleep(0)  # inside aclose, waiting for the writer task to end
    closing.cancel()  # the caller is being cancelled meanwhile
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert closing.cancelled() and out.closed
    await out.aclose()  # closing again, not cancelled: returns quietly


async def test_a_connection_lost_under_the_writer_closes_the_outbox(
        congested: tuple[Peer, ClientConnection]) -> None:
    _, ws = congested
    out = Outbox(ws, name="test-out")
    out.post(BIG)
    assert out.post("one")
    await asyncio.sleep(0)  # the writer is sending it, waiting for the socket to drain
    ws.transport.abort()  # the connection goes away under it
    async with asyncio.timeout(5):
        await ws.connection_lost_waiter
    assert out.post("next")  # queued: the writer learns at its next send
    async with asyncio.timeout(5):
        while not out.closed:
            await asyncio.sleep(0.005)
    assert out._task.done() and not out._task.cancelled()  # ended by itself, quietly
    assert not out.post("after")
    await out.aclose()
