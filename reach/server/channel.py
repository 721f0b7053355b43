"""The websocket edge: accept a connection, let its first frame decide its role, cap them all.

The first frame decides the role: ``register`` makes an agent session, ``hello`` a caller
session (with ``role: "peer"``, another coordinator's peer session), ``admin`` an operator's
admin-feed session. A bad frame gets an ``error`` frame (code ``protocol_error``) and the
connection carries on; an oversize frame closes that one connection (websocket code 1009).
Nothing here decides policy: sessions hand frames to the registry and the gateway and post
what they answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from reach.errors import ProtocolError, Unavailable
from reach.server.admin_session import AdminSession
from reach.server.agent_session import AgentSession, oversize_register
from reach.server.caller_session import CallerSession
from reach.server.keepalive import PacedKeepalive
from reach.server.openfiles import Capacity
from reach.server.peer_session import PeerSession
from reach.server.services import Services
from reach.server.session import POLICY_VIOLATION, LoopLag, Session, refuse
from reach.wire import protocol as p

__all__ = ["AdminSession", "AgentSession", "CallerSession", "Channel", "PeerSession"]
TRY_AGAIN_LATER = 1013


class Channel:
    """Accepts connections for one coordinator and runs a session for each.

    Every socket the port accepts is counted from ``accept`` on (``connection_class``), not
    only once its handshake is done: a peer that connects and sends nothing holds a file
    descriptor too. Until its first frame says who it is a connection is *unidentified*;
    past ``Capacity.per_address`` of them from one address, or ``Capacity.unidentified`` in
    all, or ``Capacity.sockets`` sockets, the longest-waiting unidentified one is closed at
    once to make room (a flood churns through its own sockets; a real peer sends its first
    frame within a round trip). Sessions of agents, callers and peers are capped at
    ``Capacity.connections``; ``Capacity.admin`` more are kept for the admin feed.
    """

    def __init__(self, services: Services, capacity: Capacity | None = None) -> None:
        self.services = services
        s = services.settings
        self.capacity = capacity or Capacity.plan(None, s.max_connections,
                                                  s.max_pending_per_address)
        self.sessions: set[Session] = set()
        self.open = 0  # connections being handled (sessions and those still before hello)
        self.sockets = 0  # sockets accepted and not yet closed (in handshake or handled)
        self.ordinary = 0  # identified sessions of agents, callers and peers
        self.admins = 0  # identified admin-feed sessions
        self.evicted = 0  # unidentified connections closed to make room, since the start
        self.loop_lag = LoopLag()
        # Why this node refuses agents and callers (a cluster's node that lost its lease; they
        # go to another node), or None.
        self.fenced: str | None = None
        # unidentified connections, oldest first: in all, and by address
        self._waiting: dict[ServerConnection, str] = {}
        self._by_address: dict[str, dict[ServerConnection, None]] = {}

    @property
    def lag(self) -> float:
        """Seconds the loop runs behind (kept by ``watch_lag``)."""
        return self.loop_lag.lag

    async def watch_lag(self) -> None:
        await self.loop_lag.watch()

    async def close_work(self, code: int, reason: str) -> int:
        """Close every agent's and caller's connection (a fenced node: they move to another
        node); operators' and peers' stay. How many were closed."""
        work = [x for x in self.sessions if isinstance(x, (AgentSession, CallerSession))]
        await asyncio.gather(*(x.ws.close(code, reason) for x in work), return_exceptions=True)
        return len(work)

    @property
    def full(self) -> bool:
        """No room for another session of an agent, caller or peer."""
        return self.ordinary >= self.capacity.connections

    @property
    def admin_room(self) -> bool:
        """Room for another admin-feed session beyond the ordinary cap."""
        return self.admins < self.capacity.admin

    @property
    def unidentified(self) -> int:
        """Connections that have not sent their first frame yet."""
        return len(self._waiting)

    def connection_class(self) -> type[ServerConnection]:
        """The websockets connection class for this channel's port: it reports each socket
        to the channel as it is accepted and as it goes (one class per channel: no state
        shared between coordinators)."""
        channel = self

        class Counted(PacedKeepalive):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                channel.accepted(self)

            def connection_lost(self, exc: Exception | None) -> None:
                channel.gone(self)
                super().connection_lost(exc)

        return Counted

    def accepted(self, ws: ServerConnection) -> None:
        """A socket was accepted: count it, and make room if it is one too many."""
        cap = self.capacity
        self.sockets += 1
        peer = ws.transport.get_extra_info("peername") if ws.transport else None
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self._waiting[ws] = address
        mine = self._by_address.setdefault(address, {})
        mine[ws] = None
        if len(mine) > cap.per_address:
            self._evict(next(iter(mine)), "too many connections from this address that have "
                                          "not sent hello or register")
        if len(self._waiting) > cap.unidentified:
            self._evict(next(iter(self._waiting)), "too many connections that have not sent "
                                                   "hello or register")
        if self.sockets > cap.sockets:
            if len(self._waiting) > 1:
                self._evict(next(iter(self._waiting)), "the coordinator is at its "
                                                       "connection limit")
            else:
                self._evict(ws, "the coordinator is at its connection limit")

    def gone(self, ws: ServerConnection) -> None:
        """A socket closed."""
        self.sockets -= 1
        self._identified(ws)

    def _identified(self, ws: ServerConnection) -> None:
        address = self._waiting.pop(ws, None)
        if address is None:
            return
        mine = self._by_address.get(address)
        if mine is not None:
            mine.pop(ws, None)
            if not mine:
                del self._by_address[address]

    def _evict(self, ws: ServerConnection, reason: str) -> None:
        """Close an unidentified connection now, without waiting for its peer's close: its
        descriptor is free at once (a websocket gets a 1008 close frame first)."""
        self._identified(ws)
        self.evicted += 1
        transport = ws.transport
        if transport is None or transport.is_closing():  # pragma: no cover - defensive
            return
        if ws.protocol.state is State.OPEN:
            ws.protocol.send_close(POLICY_VIOLATION, reason)
            transport.writelines(ws.protocol.data_to_send())
            transport.close()
        else:  # still in its HTTP handshake
            transport.abort()

    async def handle(self, ws: ServerConnection) -> None:
        self.open += 1
        try:
            await self._handle(ws)
        finally:
            self.open -= 1

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.services.settings
        try:
            async with asyncio.timeout(s.hello_timeout):
                raw = await ws.recv()
        except (TimeoutError, ConnectionClosed):
            return
        oversize = oversize_register(raw, s.max_capabilities)
        if oversize is not None:
            await refuse(ws, oversize)
            return
        try:
            first = p.parse(raw)
        except ProtocolError as exc:
            await refuse(ws, exc)
            return
        if self.fenced is not None and (isinstance(first, p.Register) or (
                isinstance(first, p.Hello) and first.role != "peer")):
            await refuse(ws, Unavailable(f"this coordinator is {self.fenced}; connect to "
                                         f"another node of the cluster"))
            return
        admin = isinstance(first, p.AdminHello) and self.admin_room
        if not admin and self.full:  # (the HTTP step refuses most of these earlier)
            await ws.close(TRY_AGAIN_LATER, "the coordinator is at its connection limit")
            return
        self._identified(ws)
        if admin:
            self.admins += 1
        else:
            self.ordinary += 1
        try:
            await self._run(ws, first)
        finally:
            if admin:
                self.admins -= 1
            else:
                self.ordinary -= 1

    async def _run(self, ws: ServerConnection, first: Any) -> None:
        """Run the session the first frame asks for, as long as it lasts."""
        session: Session
        running: Coroutine[Any, Any, None]
        if isinstance(first, p.Register):
            agent = AgentSession(self.services, ws)
            session, running = agent, agent.run(first)
        elif isinstance(first, p.Hello) and first.role == "peer":
            peer = PeerSession(self.services, ws)
            session, running = peer, peer.run(first)
        elif isinstance(first, p.Hello):
            caller = CallerSession(self.services, ws, self.loop_lag)
            session, running = caller, caller.run(first)
        elif isinstance(first, p.AdminHello):
            admin = AdminSession(self.services, ws)
            session, running = admin, admin.run(first)
        else:
            await refuse(ws, ProtocolError(
                f"the first frame must be 'register' (agents), 'hello' (callers) or 'admin' "
                f"(operators), not {first.type!r}"))
            return
        self.sessions.add(session)
        try:
            await running
        finally:
            self.sessions.discard(session)
