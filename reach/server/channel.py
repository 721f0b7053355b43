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

from reach.core import counts
from reach.errors import ProtocolError, Unavailable
from reach.server.admin_session import AdminSession
from reach.server.agent_session import AgentSession, oversize_register
from reach.server.caller_session import CallerSession
from reach.server.peer_session import PeerSession
from reach.server.services import Services
from reach.server.session import POLICY_VIOLATION, LoopLag, Session, refuse
from reach.wire import protocol as p

__all__ = ["AdminSession", "AgentSession", "CallerSession", "Channel", "PeerSession"]
TRY_AGAIN_LATER = 1013


class Channel:
    """Accepts connections for one coordinator and runs a session for each."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.sessions: set[Session] = set()
        self.open = 0  # connections being handled (sessions and those still before hello)
        self.loop_lag = LoopLag()
        # Why this node refuses agents and callers (a cluster's node that lost its lease; they
        # go to another node), or None.
        self.fenced: str | None = None
        self._pending: dict[str, int] = {}  # address → connections not yet past hello

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
        return self.open >= self.services.settings.max_connections

    async def handle(self, ws: ServerConnection) -> None:
        self.open += 1
        try:
            await self._handle(ws)
        finally:
            self.open -= 1

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.services.settings
        if self.open > s.max_connections:  # (the HTTP step refuses most of these earlier)
            await ws.close(TRY_AGAIN_LATER, "the coordinator is at its connection limit")
            return
        address = str(ws.remote_address[0]) if ws.remote_address else ""
        if self._pending.get(address, 0) >= s.max_pending_per_address:
            await ws.close(POLICY_VIOLATION, "too many connections from this address that "
                                             "have not sent hello or register")
            return
        counts.add(self._pending, address)
        try:
            async with asyncio.timeout(s.hello_timeout):
                raw = await ws.recv()
        except (TimeoutError, ConnectionClosed):
            return
        finally:
            counts.drop(self._pending, address)
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
