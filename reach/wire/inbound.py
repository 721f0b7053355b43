"""Whole messages handed to their session as they come off the socket.

websockets queues each incoming message for a reader coroutine (``async for raw in ws``): per
message a future set, a task woken and a turn of the loop before the session sees it. A
session handles a message in one synchronous call, so while it is *armed* (``Inbound.arm``)
``process_event`` hands each whole message to it at once, as its bytes are parsed off the
socket: about a tenth of the coordinator's work per call, measured (docs/performance.md).

websockets' queue stays for what is not handed over at once, and the reading loop takes it
from there as before (``read`` below; a coordinator's session: ``Session._frames``): a fragmented
message, a message after ``YIELD_EVERY`` of one read (the rest wait a turn of the loop, so one
peer's burst does not hold everyone else's), everything while the session holds off (its
``_backlog``) or before it arms. Order is kept: once a message is queued, the next ones queue
behind it until the reading loop has taken them all (``pending``) and arms again.

The coordinator's server connections (reach.server.keepalive) and the SDKs' client connections
(reach.sdk.connection) are ``Inbound``; only ``process_event``, ``recv``, ``data_received`` and
``connection_lost`` of websockets' ``Connection`` are extended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Frame, Opcode
from websockets.protocol import State

YIELD_EVERY = 16  # messages one read hands over before the rest wait a turn of the loop

_TEXT, _BINARY, _CONT = Opcode.TEXT, Opcode.BINARY, Opcode.CONT


class Inbound(Connection):
    """A connection that hands whole messages to whoever armed it (module doc)."""

    _take: Callable[[bytes], None] | None = None
    _wake: asyncio.Future[None] | None = None
    _burst = 0  # messages handed over during the current read
    _queued = 0  # whole messages put in websockets' queue since the connection opened
    _taken = 0  # ... and taken out of it by ``recv``

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
        super().data_received(data)

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
