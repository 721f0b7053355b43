"""The REST door's connections get the websocket port's defences (reach/server/channel.py).

aiohttp closes a connection idle between requests (its keep-alive timeout, set here to
``http_idle_timeout``) but bounds neither how long a new connection may take to send its first
request head, nor how many connections one address holds before any request of theirs said who
it is, nor how many connections there are. 1,400 sockets that sent nothing, half a head or a
trickled body held the port (and the process's file descriptors) for as long as they liked.

``Gate`` wraps each connection's aiohttp protocol (``Guarded``, a pass-through) and keeps:

- a first-head timeout: a connection that has not completed a request head ``hello_timeout``
  after it opened is aborted (the websocket port's first-frame timeout);
- a cap per address on connections not yet *identified*: at most ``max_pending_per_address``
  connections from one address that have not yet carried a request whose caller the door could
  identify (with tokens: a valid token); past it the address's longest-waiting one is closed
  for the new one, or, all of them answering a request, the new one is answered 429;
- a connection cap, ``max_connections`` (this port's own count): past it the connection idle
  the longest (between requests, or not yet sent a head) is closed to make room, and when every
  connection is answering a request the new one is answered 503 and closed.

Bodies have their own timeout (``http_body_timeout``, in ``FrontDoor._body``). The door tells
the gate when a connection starts and ends answering a request (``started``, ``answered``) and
when a request was identified (``identified``); all three are dictionary steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from pydantic_core import to_json

from reach.config import Settings
from reach.core import counts
from reach.server.front_models import PROBLEM_TYPE


def _refusal(status: int, reason: str, code: str, detail: str) -> bytes:
    """A whole HTTP response, problem+json, that closes the connection (written before any
    request was read: the peer's request, if it sent one, is not answered otherwise)."""
    body = to_json({"type": PROBLEM_TYPE + code, "title": reason, "status": status,
                    "detail": detail, "code": code})
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
            ).encode() + body


TOO_MANY = _refusal(429, "Too Many Requests", "rejected",
                    "too many connections from this address are answering requests that "
                    "have not said who they are (max_pending_per_address); retry shortly")
FULL = _refusal(503, "Service Unavailable", "unavailable",
                "the coordinator is at its request limit (max_connections): every "
                "connection to its HTTP port is answering a request; retry shortly")


class Guarded(asyncio.Protocol):
    """One connection: aiohttp's protocol behind the gate's admission and first-head timer."""

    def __init__(self, gate: Gate, make: Callable[[], asyncio.BaseProtocol]) -> None:
        self.gate = gate
        self._make = make
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.address = ""
        self.pending = False  # counted against its address until a request is identified
        self.fresh = True  # no request head completed yet
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "")
        refusal = self.gate.admit(self)
        if refusal is not None:
            self.transport.write(refusal)
            self.transport.close()
            return
        self.inner = cast(asyncio.Protocol, self._make())
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.forget(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def abort(self) -> None:
        self.gate.forget(self)
        if self.transport is not None:
            self.transport.abort()

    def first_head_due(self) -> None:
        self.timer = None
        if self.fresh:
            self.abort()


class Gate:
    """Admission, timers and counts for one front door's connections (no global state)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conns: dict[asyncio.BaseTransport, Guarded] = {}
        # connections not answering a request, the longest idle first (the one closed when
        # the cap is reached): insertion order, re-inserted each time one becomes idle
        self.idle: dict[Guarded, None] = {}
        self.pending: dict[str, int] = {}  # address → its connections not yet identified
        # address → those of them not answering a request, the longest waiting first
        self.waiting: dict[str, dict[Guarded, None]] = {}

    def protocol(self, make: Callable[[], asyncio.BaseProtocol]
                 ) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for ``loop.create_server``: ``make`` (aiohttp's) behind the
        gate."""
        return lambda: Guarded(self, make)

    def admit(self, conn: Guarded) -> bytes | None:
        """Count a new connection in, making room if it must, or the response refusing it.

        At its address's cap the address's longest-waiting unidentified connection is
        closed for it (an address's flood churns through its own sockets, and a real caller
        behind the same address, a NAT or this host, still gets in); with all of them
        answering a request, 429. At the connection cap the longest-idle connection of any
        address goes; with every connection answering a request, 503."""
        s = self.settings
        if self.pending.get(conn.address, 0) >= s.max_pending_per_address:
            victim = next(iter(self.waiting.get(conn.address, ())), None)
            if victim is None:
                return TOO_MANY
            victim.abort()
        if len(self.conns) >= s.max_connections:
            victim = next(iter(self.idle), None)
            if victim is None:
                return FULL
            victim.abort()
        assert conn.transport is not None
        self.conns[conn.transport] = conn
        self.idle[conn] = None
        conn.pending = True
        counts.add(self.pending, conn.address)
        self.waiting.setdefault(conn.address, {})[conn] = None
        conn.timer = asyncio.get_running_loop().call_later(s.hello_timeout,
                                                           conn.first_head_due)
        return None

    def forget(self, conn: Guarded) -> None:
        """The connection is closing: out of every count (twice is harmless)."""
        transport = conn.transport
        if transport is not None and self.conns.get(transport) is conn:
            del self.conns[transport]
        self.idle.pop(conn, None)
        self._identified(conn)
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def started(self, transport: asyncio.BaseTransport | None) -> None:
        """A request head on this connection is complete and being answered."""
        conn = self.conns.get(transport) if transport is not None else None
        if conn is not None:
            conn.fresh = False
            self.idle.pop(conn, None)
            if conn.pending:
                self._unwait(conn)

    def answered(self, transport: asyncio.BaseTransport | None) -> None:
        """The connection's request is answered (aiohttp's keep-alive timer runs now)."""
        conn = self.conns.get(transport) if transport is not None else None
        if conn is not None:
            self.idle[conn] = None
            if conn.pending:
                self.waiting.setdefault(conn.address, {})[conn] = None

    def identified(self, transport: asyncio.BaseTransport | None) -> None:
        """A request on this connection named a caller the door accepts: it no longer
        counts against its address's cap."""
        conn = self.conns.get(transport) if transport is not None else None
        if conn is not None:
            self._identified(conn)

    def _identified(self, conn: Guarded) -> None:
        if conn.pending:
            conn.pending = False
            counts.drop(self.pending, conn.address)
            self._unwait(conn)

    def _unwait(self, conn: Guarded) -> None:
        waiting = self.waiting.get(conn.address)
        if waiting is not None:
            waiting.pop(conn, None)
            if not waiting:
                del self.waiting[conn.address]
