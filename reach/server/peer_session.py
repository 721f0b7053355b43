"""Another coordinator's session here: the holder's side of a peer link (docs/protocol.md §14).

A peer says ``hello`` with ``role: "peer"``, its ``node`` and the cluster's peer token
(``Settings.peer_token``, else the admin token); anything else is refused with
``unauthorized`` before it learns a thing. Then this session streams this node's own agents
(reach.cluster.feed: a snapshot, then coalesced changes) and carries out the attempts the
peer forwards to them.

A ``forward`` goes straight to the named agent's own link: the peer's gateway already chose
the agent, so no second routing decision is made here. What is checked is what may have
changed since the peer's pick: the agent is still held here, online, not draining, declares
the capability and has a free slot. If not, the answer is at once an ``error`` with code
``unavailable`` and ``details.link: "undelivered"`` (nothing ran: the peer fails over). The
attempt takes a slot of the agent here, so this node's own callers and every peer share the
agent's ``max_concurrency``. The task stays the peer's: its timeouts, retries and task row
are kept there, and nothing durable is written here.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from websockets.asyncio.server import ServerConnection

from reach.cluster.feed import Outbound, frames, local
from reach.core.agents import AgentRecord
from reach.errors import ProtocolError, Unauthorized, Unavailable
from reach.ports import Work
from reach.server.services import Services
from reach.server.session import Session, error_frame, refuse, wire_error
from reach.wire import peer as wp
from reach.wire import protocol as p

_Welcome = p.unchecked(p.Welcome)
_Ack = p.unchecked(p.Ack)
_Chunk = p.unchecked(p.Chunk)
_Result = p.unchecked(p.Result)
_Error = p.unchecked(p.Error)


class Relay:
    """The ``ports.Reply`` of one forwarded attempt: what the agent says goes to the peer."""

    __slots__ = ("session", "key", "record", "capability", "acked", "done")

    def __init__(self, session: PeerSession, key: tuple[str, int], record: AgentRecord,
                 capability: str) -> None:
        self.session, self.key, self.record, self.capability = session, key, record, capability
        self.acked = self.done = False

    def ack(self) -> None:
        if not self.acked and not self.done:
            self.acked = True
            self.session.out.post(p.dump(_Ack(task_id=self.key[0], attempt=self.key[1])))

    def chunk(self, seq: int, data: Any) -> None:
        if not self.done:
            self.session.out.post(p.dump(_Chunk(task_id=self.key[0], attempt=self.key[1],
                                                seq=seq, data=data)))

    def resolve(self, kind: str, payload: Any = None) -> None:
        if not self._end():
            return
        task_id, attempt = self.key
        out = self.session.out
        if kind == "ok":
            out.post(p.dump(_Result(task_id=task_id, attempt=attempt, result=payload)))
        elif kind == "error" and isinstance(payload, dict):
            out.post(p.dump(_Error(task_id=task_id, attempt=attempt,
                                   error=wire_error(payload))))
        else:  # lost | undelivered (or a link's own word): what became of the delivery
            out.post(error_frame(Unavailable(
                f"the delivery to agent {self.record.name!r} was {kind} at node "
                f"{self.session.services.node_id}", link=kind if kind in (
                    "lost", "undelivered") else "lost", agent=self.record.name),
                task_id=task_id, attempt=attempt))

    def abandon(self) -> None:
        """The peer went away or gave the attempt up: stop it at the agent, free the slot."""
        if self._end():
            link = self.record.link
            if link is not None:
                link.cancel(*self.key)

    def _end(self) -> bool:
        if self.done:
            return False
        self.done = True
        self.session.relays.pop(self.key, None)
        self.record.give(self.capability)
        self.session.services.gateway.slot_freed(self.record)
        return True


class PeerSession(Session):
    """A peer coordinator's link here: this node's agents out, forwarded attempts in."""

    def __init__(self, services: Services, ws: ServerConnection) -> None:
        super().__init__(services, ws)
        self.node: str | None = None
        self.relays: dict[tuple[str, int], Relay] = {}

    async def run(self, hello: p.Hello) -> None:
        sv = self.services
        node = sv.node
        given, token = (hello.token or "").encode(), b"" if node is None else node.token.encode()
        if node is None or not (given and token and secrets.compare_digest(given, token)):
            await refuse(self.ws, Unauthorized(
                "peer link refused: a peer must present the cluster's peer token "
                "(Settings.peer_token, else the admin token)", role="peer"))
            await self.out.aclose()
            return
        if not hello.node or hello.node == sv.node_id:
            await refuse(self.ws, ProtocolError(
                f"a peer hello must name its own node, not {hello.node!r} (this node is "
                f"{sv.node_id!r})", role="peer", same_node=hello.node == sv.node_id))
            await self.out.aclose()
            return
        self.node = hello.node
        self.out.post(p.dump(_Welcome(role="peer", node=sv.node_id,
                                      heartbeat_interval=sv.settings.heartbeat_interval,
                                      max_frame_bytes=sv.settings.max_frame_bytes)))
        sub = node.feed.subscribe()
        pump = asyncio.get_running_loop().create_task(self._pump(sub),
                                                      name=f"reach-peer-feed {self.node}")
        try:
            await self._frames(self._on_frame, wp.parse_at_holder)
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
            node.feed.unsubscribe(sub)
            for relay in list(self.relays.values()):
                relay.abandon()
            await self.out.aclose()

    async def _pump(self, sub: Outbound) -> None:
        """This node's agents to the peer: the snapshot, then what changed, every
        ``peer_flush`` seconds (beats and load found by a scan every quarter interval)."""
        sv = self.services
        s = sv.settings
        limit = s.max_frame_bytes
        while True:  # the snapshot, a batch of rows at a time; ``synced`` on its last frame
            rows = sub.rows(sv.clock.wall())
            for text in frames(rows, limit, synced=not sub.dirty):
                self.out.post(text)
            if not sub.dirty:
                break
            await asyncio.sleep(0)
        scan_every = max(s.peer_flush, s.heartbeat_interval / 4)
        next_scan = sv.clock.now() + scan_every
        while not self.out.closed:
            await asyncio.sleep(s.peer_flush)
            if sv.clock.now() >= next_scan:
                sub.scan()
                next_scan = sv.clock.now() + scan_every
            while sub.dirty and not self.out.closed:
                for text in frames(sub.rows(sv.clock.wall()), limit):
                    self.out.post(text)
                await asyncio.sleep(0)

    def _on_frame(self, frame: Any) -> None:
        key = (frame.task_id, frame.attempt)
        if frame.type == "cancel":
            relay = self.relays.get(key)
            if relay is not None:
                relay.abandon()
            return
        if key in self.relays:
            raise ProtocolError(f"attempt {frame.attempt} of task {frame.task_id!r} is "
                                f"already forwarded here", type="forward")
        refusal = self._refusal(frame)
        if refusal is not None:
            why, full = refusal
            # ``full``: the agent is well, only busy (its slots are shared with this node's
            # callers and every peer's): the peer waits or fails over without a fault.
            extra = {"full": True} if full else {}
            self.out.post(error_frame(Unavailable(why, link="undelivered",
                                                  agent_id=frame.agent_id, **extra),
                                      task_id=frame.task_id, attempt=frame.attempt))
            return
        record = self.services.registry.by_id[frame.agent_id]
        link = record.link
        assert link is not None  # (checked by _refusal)
        relay = self.relays[key] = Relay(self, key, record, frame.capability)
        record.take(frame.capability)
        work = Work(frame.task_id, frame.attempt, frame.capability, frame.params,
                    frame.idempotency_key, frame.trace_id, frame.caller, frame.parent_task_id,
                    frame.traceparent, frame.deadline_ms)
        if not link.deliver(work, relay):
            relay.resolve("undelivered")

    def _refusal(self, frame: wp.Forward) -> tuple[str, bool] | None:
        """Why this node cannot pass ``frame`` on to its agent now, and whether only for want
        of a free slot (None: it can)."""
        record = self.services.registry.by_id.get(frame.agent_id)
        here = self.services.node_id
        if record is None or not local(record):
            return f"no agent {frame.agent_id!r} is held at node {here}", False
        if record.link is None or not record.reachable or record.draining:
            return (f"agent {record.name!r} is not online at node {here} "
                    f"({record.state.value})", False)
        if frame.capability not in record.capabilities:
            return (f"agent {record.name!r} does not declare {frame.capability!r}",
                    False)
        if not record.room(frame.capability):
            return f"agent {record.name!r} has no free slot for {frame.capability!r}", True
        return None
