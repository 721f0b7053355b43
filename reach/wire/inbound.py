"""Whole messages handed to their session as they come off the socket.

websockets queues each incoming message for a reader coroutine (``async for raw in ws``): per
message a future set, a task woken and a turn of the loop before the session sees it. A
session handles a message in one synchronous call, so while it is *armed* (``Inbound.arm``)
each whole message is handed to it at once, as its bytes come off the socket: about a tenth
of the coordinator's work per call, measured (docs/performance.md). The frame a message
almost always is (final, text or binary, within the size limit) is found in those bytes here
(``data_received``, reach.wire.framing) rather than by websockets' parser, which costs about
three times as much a frame; every other frame goes to websockets whole, in order, and what
it refuses it refuses as before (its close codes, from the header alone), after which it
reads the rest of that connection. So do the bytes of the opening handshake, and any frame
a client sent before the handshake was answered.

websockets' queue stays for what is not handed over at once, and the reading loop takes it
from there as before (``read`` below; a coordinator's session: ``Session._frames``): a fragmented
message, a message after ``YIELD_EVERY`` of one read (the rest wait a turn of the loop, so one
peer's burst does not hold everyone else's), everything while the session holds off (its
``_backlog``) or before it arms. Order is kept: once a message is queued, the next ones queue
behind it until the reading loop has taken them all (``pending``) and arms again.

The coordinator's server connections (reach.server.keepalive) and the SDKs' client connections
(reach.sdk.connection) are ``Inbound``; only ``process_event``, ``recv``, ``data_received``,
``eof_received`` and ``connection_lost`` of websockets' ``Connection`` are extended.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Frame, Opcode
from websockets.protocol import SERVER, State
from websockets.speedups import apply_mask

from reach.wire.framing import BINARY, TEXT, find

YIELD_EVERY = 16  # messages one read hands over before the rest wait a turn of the loop

_TEXT, _BINARY, _CONT = Opcode.TEXT, Opcode.BINARY, Opcode.CONT
_OPEN, _CONNECTING = State.OPEN, State.CONNECTING


class Inbound(Connection):
    """A connection that hands whole messages to whoever armed it (module doc)."""

    _take: Callable[[bytes], None] | None = None
    _wake: asyncio.Future[None] | None = None
    _burst = 0  # messages handed over during the current read
    _queued = 0  # whole messages put in websockets' queue since the connection opened
    _taken = 0  # ... and taken out of it by ``recv``
    _fast = True  # frames are found here (``data_received``); False: websockets reads them
    _rest: bytearray | None = None  # the start of a frame whose end has not come yet
    _need = 0  # ... and how long ``_rest`` must be before it is looked at again
    _max = -1.0  # the largest message websockets takes on this connection (once looked up)
    _head_done = False  # the opening handshake's HTTP head has been received whole
    _tail = b""  # ... the last bytes of it so far, while it has not

    @property
    def pending(self) -> int:
        """Whole messages waiting in websockets' queue: ``recv`` must take them first."""
        return self._queued - self._taken

    def arm(self, take: Callable[[bytes], None]) -> asyncio.Future[None]:
        """Hand each whole message (its payload, text or binary) to ``take`` from now on. The
        future is done when that stops (``disarm``, a message queued, the connection lost);
        the caller then reads with ``recv`` what is ``pending`` before arming again."""
        self._take = take
        self._wake = wake = asyncio.get_running_loop().create_future()
        return wake

    def disarm(self) -> None:
        """Hand nothing more over: messages queue for ``recv`` (the session holds off, or its
        handler failed)."""
        self._take = None
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def recv(self, decode: bool | None = None) -> Any:
        message = await super().recv(decode)
        self._taken += 1
        return message

    def data_received(self, data: bytes) -> None:
        self._burst = 0
        if not self._fast:
            super().data_received(data)
            return
        rest = self._rest
        if rest is not None:  # the start of a frame came before
            rest += data
            if len(rest) < self._need:
                return
            data, self._rest = bytes(rest), None
        protocol = self.protocol
        if protocol.state is _CONNECTING:  # the handshake: websockets' own
            self._handshake(data)
            super().data_received(data)
            return
        limit, masked = self._max, protocol.side is SERVER  # (a client's frames are masked)
        if limit < 0:
            limit = self._max = min((n for n in (protocol.max_message_size,
                                                 protocol.max_fragment_size) if n is not None),
                                    default=math.inf)
        at, size = 0, len(data)
        while at < size:
            if protocol.state is not _OPEN:  # closing: the close handshake is websockets'
                self._to_websockets(data[at:])
                return
            found = find(data, at)
            if found is None:  # its length has not come yet
                self._rest, self._need = bytearray(data[at:]), size - at + 1
                return
            first, start, end, key = found
            if end - start > limit or (key is None) is masked or first & 0x70:
                # Too big, masked the wrong way, or reserved bits: websockets refuses it
                # (from its header alone).
                self._to_websockets(data[at:])
                return
            if end > size:  # wait for the rest of the frame (at most ``limit`` bytes)
                self._rest, self._need = bytearray(data[at:]), end - at
                return
            # (``current_size``: websockets is assembling a fragmented message)
            if (first == TEXT or first == BINARY) and protocol.current_size is None:
                take = self._take
                if take is not None and self._burst < YIELD_EVERY:
                    self._burst += 1
                    take(data[start:end] if key is None else apply_mask(data[start:end], key))
                    at = end
                    continue
            # Queued in order (process_event), or a control frame or a fragment: websockets
            # reads it, whole.
            super().data_received(data[at:end])
            at = end

    def _handshake(self, data: bytes) -> None:
        """Bytes of the opening handshake. Frames are found here only after it, from the
        first byte after the HTTP head on: any byte that came after the head before the
        handshake was over (frames sent before the answer, which a client may not do) is
        websockets' to read, and so is the rest of that connection."""
        if self._head_done:
            self._fast = False
            return
        seen = self._tail + data
        end = seen.find(b"\r\n\r\n")
        if end < 0:
            self._tail = seen[-3:]
            return
        self._head_done = True
        if end + 4 < len(seen):
            self._fast = False

    def _to_websockets(self, data: bytes) -> None:
        """websockets reads ``data``, and every byte after it on this connection."""
        self._fast = False
        super().data_received(data)

    def eof_received(self) -> None:
        if self._rest is not None:  # websockets finds the stream cut mid-frame, as before
            data, self._rest = bytes(self._rest), None
            self._to_websockets(data)
        super().eof_received()

    def process_event(self, event: Any) -> None:
        take = self._take
        if take is not None and type(event) is Frame:
            opcode = event.opcode
            if event.fin and (opcode is _TEXT or opcode is _BINARY) and \
                    self._burst < YIELD_EVERY:
                self._burst += 1
                data = event.data
                take(data if type(data) is bytes else bytes(data))
                return
            if opcode is _TEXT or opcode is _BINARY or opcode is _CONT:
                self.disarm()  # queued: the next ones queue behind it, in order
        if type(event) is Frame and event.fin and event.opcode in (_TEXT, _BINARY, _CONT):
            self._queued += 1
        super().process_event(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        super().connection_lost(exc)


async def read(ws: Connection, take: Callable[[bytes | str], None]) -> None:
    """Hand every message of ``ws`` to ``take`` until it closes, as ``async for`` would: a
    normal closure ends the read, any other raises ``ConnectionClosedError``. On an
    ``Inbound`` connection most are handed over as they arrive; an exception ``take`` raises
    ends the read either way."""
    failed: list[Exception] = []
    inbound = ws if isinstance(ws, Inbound) else None

    def direct(raw: bytes) -> None:
        try:
            take(raw)
        except Exception as exc:
            failed.append(exc)
            inbound.disarm()  # type: ignore[union-attr]

    try:
        while True:
            if inbound is not None and not inbound.pending:
                await inbound.arm(direct)
                if failed:
                    raise failed[0]
                if not inbound.pending and ws.protocol.state is State.OPEN:
                    continue
            take(await ws.recv())
    except ConnectionClosedOK:
        return
    finally:
        if inbound is not None:
            inbound.disarm()
