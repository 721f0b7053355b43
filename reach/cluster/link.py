"""The caller's side of a peer link: one websocket to a node that holds agents.

``PeerConnection`` is this node's one connection to a peer (docs/protocol.md §14): it reads
the peer's ``agents`` rows into a ``Mirror`` and carries every attempt this node's gateway
sends to the peer's agents. ``PeerLink`` is the ``ports.AgentLink`` of one such agent: a
name for the agent over the shared connection, so thousands of remote agents cost one
socket. An attempt goes out as a ``forward`` frame and its ``ack``, ``chunk``, ``result`` or
``error`` come back on the same connection; when it drops, every attempt in flight over it
is ``lost`` (the gateway's rules then retry idempotent work elsewhere) and the peer's agents
are disconnected here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from reach.cluster.mirror import Mirror
from reach.core.results import compile_returns
from reach.core.schemas import SchemaError, compile_schema
from reach.errors import InvalidParams, ProtocolError
from reach.ports import Reply, Work
from reach.wire import peer as wp
from reach.wire import protocol as p
from reach.wire.outbox import Outbox

log = logging.getLogger("reach.cluster")
_Forward = p.unchecked(wp.Forward)
_Cancel = p.unchecked(p.Cancel)
UNTOLD = 10_000  # attempts given up untold that a link remembers, to tell later
#: ``error.details.link`` of an error frame that reports what became of the delivery at the
#: holder rather than an agent's fault: the kinds a ``ports.Reply`` resolves with.
LINK_KINDS = ("lost", "undelivered")


class PeerLink:
    """The ``AgentLink`` of one agent a peer holds: work for it rides the peer connection."""

    __slots__ = ("conn", "agent_id")

    def __init__(self, conn: PeerConnection, agent_id: str) -> None:
        self.conn = conn
        self.agent_id = agent_id

    @property
    def node(self) -> str:
        return self.conn.node

    def deliver(self, work: Work, reply: Reply) -> bool:
        return self.conn.forward(self.agent_id, work, reply)

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        self.conn.cancel(task_id, attempt, tell=tell)

    async def close(self, reason: str) -> None:
        """One remote agent ends here; the connection it shares stays (``Peers.remove``)."""


class PeerConnection:
    """One open peer link: the peer's agents mirrored, the attempts forwarded over it."""

    def __init__(self, ws: ClientConnection, node: str, mirror: Mirror, *,
                 max_outbox_bytes: int, max_schema_bytes: int,
                 max_frame_bytes: int = 1 << 20) -> None:
        self.ws = ws
        self.max_frame_bytes = max_frame_bytes  # the peer's, from its welcome
        self.node = node
        self.mirror = mirror
        self.max_schema_bytes = max_schema_bytes
        self.out = Outbox(ws, name=f"reach-peer-out {node}", limit=max_outbox_bytes)
        self.pending: dict[tuple[str, int], Reply] = {}
        # attempts given up without telling the agent (a timeout): told later, if asked
        self.untold: OrderedDict[tuple[str, int], None] = OrderedDict()
        self.bad_frames = 0  # frames from the peer that could not be used (logged)
        mirror.link_for = lambda agent_id: PeerLink(self, agent_id)

    # ------------------------------------------------------------ what the gateway sends

    def forward(self, agent_id: str, work: Work, reply: Reply) -> bool:
        """Send one attempt; False (nothing sent: the gateway fails over) once the link is
        closing. A frame over the peer's ``max_frame_bytes`` is not sent either (the peer
        would close the whole link for it, 1009, losing every other attempt on it): the
        attempt is answered ``invalid_params`` instead, a final answer that is no fault of
        the agent's."""
        if self.out.closed:
            return False
        text = p.dump(_Forward(
                task_id=work.task_id, attempt=work.attempt, capability=work.capability,
                params=work.params, idempotency_key=work.idempotency_key,
                trace_id=work.trace_id, parent_task_id=work.parent_task_id,
                traceparent=work.traceparent, deadline_ms=work.deadline_ms,
                caller=work.caller, agent_id=agent_id))
        size = p.oversize(text, self.max_frame_bytes)
        if size is not None:
            # The params are the problem, not the agent: answer the attempt at once (a final
            # answer, so neither a retry nor a fault against the agent's breaker follows).
            error = InvalidParams(
                f"the attempt is {size} bytes, over the {self.max_frame_bytes}-byte frame limit "
                f"of node {self.node} that holds the agent; send smaller params",
                reason="too large for the agent's node", answer=True).to_wire()
            asyncio.get_running_loop().call_soon(reply.resolve, "error", error)
            return True
        if not self.out.post(text):
            return False
        self.pending[(work.task_id, work.attempt)] = reply
        return True

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        """Forget the attempt: the holder node frees its slot too, and, when ``tell``, has
        its agent stop it (also later, for one first given up untold)."""
        key = (task_id, attempt)
        if self.pending.pop(key, None) is None and not (tell and key in self.untold):
            return
        self.untold.pop(key, None)
        if not tell:
            self.untold[key] = None
            if len(self.untold) > UNTOLD:
                self.untold.popitem(last=False)
        self.out.post(p.dump(_Cancel(task_id=task_id, attempt=attempt, stop=tell)))

    # ------------------------------------------------------------ what the peer sends

    async def run(self) -> None:
        """Read the peer's frames until the connection ends; then every attempt in flight
        over it is lost and the peer's agents are disconnected here."""
        try:
            async for raw in self.ws:
                try:
                    frame = wp.parse_at_caller(raw)
                except (ProtocolError, InvalidParams) as exc:
                    self._bad(exc.message)
                    continue
                if isinstance(frame, wp.Agents):
                    await self._agents(frame)
                else:
                    self._answer(frame)
        except ConnectionClosed:
            pass
        finally:
            pending, self.pending = self.pending, {}
            for reply in pending.values():
                reply.resolve("lost")
            self.mirror.drop()
            await self.out.aclose()

    async def _agents(self, frame: wp.Agents) -> None:
        specs = [spec for row in frame.rows for spec in row.capabilities or ()]
        if specs:
            # Compiling schemas is CPU work (~3 ms per KiB): off the loop, as a registration's
            # is; the registry then finds each validator in the shared cache.
            await asyncio.to_thread(_precompile, specs, self.max_schema_bytes)
        for line in self.mirror.apply(frame):
            self._bad(line)

    def _answer(self, frame: Any) -> None:
        key = (frame.task_id, frame.attempt)
        if frame.type in ("result", "error"):
            reply = self.pending.pop(key, None) if frame.task_id is not None else None
        else:
            reply = self.pending.get(key)
        if reply is None:
            if frame.type == "error" and frame.task_id is None:
                self._bad(f"the peer reports: {frame.error.message}")
            return  # an attempt given up here (timed out, cancelled): its answer is late
        if frame.type == "ack":
            reply.ack()
        elif frame.type == "chunk":
            reply.ack()
            reply.chunk(frame.seq, frame.data)
        elif frame.type == "result":
            reply.resolve("ok", frame.result)
        else:
            error = frame.error.model_dump()
            link = error["details"].get("link") if error["code"] == "unavailable" else None
            if link == "undelivered" and error["details"].get("full") is True:
                reply.resolve("full")  # no free slot at the holder: neither fault nor hop
            elif link in LINK_KINDS:
                reply.resolve(link)
            else:
                reply.resolve("error", error)

    def _bad(self, why: str) -> None:
        # Not answered: an error frame to the peer would be refused there in turn.
        self.bad_frames += 1
        log.warning("peer %s: %s", self.node, why)

    async def close(self, reason: str) -> None:
        await self.ws.close(1000, reason)


def _precompile(specs: list[p.CapabilitySpec], max_bytes: int) -> None:
    for spec in specs:
        try:
            compile_schema(spec.params, max_bytes=max_bytes)
            compile_returns(spec.returns, max_bytes=max_bytes)
        except SchemaError:
            continue  # refused again, with its reason, when the row is applied
