"""The outbox on a real loopback websocket whose peer reads: the first frame of a loop step
leaves at once, the frames posted after it in the same step leave together in one write at the
step's end, in order; anything else written through the connection meanwhile (a close) keeps
that order, and a burst never holds more than ``EAGER_LIMIT`` back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from reach.wire.outbox import Outbox


class Reader:
    """A server that reads every frame until the close and keeps them in order."""

    def __init__(self) -> None:
        self.got: list[str] = []
        self.ended = asyncio.Event()

    async def handler(self, ws: ServerConnection) -> None:
        try:
            async for message in ws:
                assert isinstance(message, str)
                self.got.append(message)
        except ConnectionClosed:
            pass
        self.ended.set()

    async def until(self, count: int) -> list[str]:
        async with asyncio.timeout(5):
            while len(self.got) < count:
                await asyncio.sleep(0.002)
        return self.got


@pytest.fixture
async def link() -> AsyncIterator[tuple[Reader, ClientConnection, list[int]]]:
    """A client connection to a reading server, and the size of each write to its socket."""
    reader = Reader()
    async with serve(reader.handler, "127.0.0.1", 0, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None) as ws:
            writes: list[int] = []
            transport: Any = ws.transport
            write = transport.write

            def recording(data: bytes) -> None:
                writes.append(len(data))
                write(data)

            transport.write = recording
            yield reader, ws, writes


async def test_a_burst_in_one_step_leaves_in_two_writes_in_order(
        link: tuple[Reader, ClientConnection, list[int]]) -> None:
    reader, ws, writes = link
    out = Outbox(ws, name="test-out")
    try:
        frames = [f"frame-{i}" for i in range(20)]
        for text in frames:
            assert out.post(text)
        assert len(writes) == 1  # the first at once: the next process can start on it
        await asyncio.sleep(0)
        assert len(writes) == 2  # the other nineteen together, at the step's end
        assert await reader.until(20) == frames
        # A lone frame in a later step leaves at once, and costs no second write.
        assert out.post("alone")
        assert len(writes) == 3
        await asyncio.sleep(0)
        assert len(writes) == 3
        assert await reader.until(21) == [*frames, "alone"]
    finally:
        await out.aclose()


async def test_empty_frames_in_a_burst_are_held_and_sent_too(
        link: tuple[Reader, ClientConnection, list[int]]) -> None:
    reader, ws, writes = link
    out = Outbox(ws, name="test-out")
    try:
        for text in ("first", "", ""):
            assert out.post(text)
        await asyncio.sleep(0)
        assert len(writes) == 2
        assert await reader.until(3) == ["first", "", ""]
    finally:
        await out.aclose()


async def test_a_close_in_the_same_step_goes_out_behind_the_held_frames(
        link: tuple[Reader, ClientConnection, list[int]]) -> None:
    reader, ws, _ = link
    out = Outbox(ws, name="test-out")
    for text in ("first", "second", "third"):
        assert out.post(text)
    await out.aclose()
    await ws.close()  # written through the protocol's buffer: the held frames go first
    async with asyncio.timeout(5):
        await reader.ended.wait()
    assert reader.got == ["first", "second", "third"]


async def test_a_burst_past_the_eager_limit_is_written_as_it_grows(
        link: tuple[Reader, ClientConnection, list[int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader, ws, writes = link
    monkeypatch.setattr(Outbox, "EAGER_LIMIT", 1_000)
    out = Outbox(ws, name="test-out")
    try:
        blocks = [str(i) * 300 for i in range(8)]
        for block in blocks:
            assert out.post(block)
        # The first at once; the fifth makes 1,200 held, past the limit: written then.
        assert len(writes) == 2
        await asyncio.sleep(0)
        assert len(writes) == 3  # the last three at the step's end
        assert await reader.until(8) == blocks
    finally:
        await out.aclose()
