"""Another coordinator's session here: the holder's side of a peer link (docs/protocol.md §14).

A peer says ``hello`` with ``role: "peer"``, its ``node`` and a nonce; this node answers with
a ``challenge`` that proves it knows the cluster's peer secret (``Settings.peer_token``, else
the admin token) and waits for the peer's ``proof`` (reach.cluster.handshake): the secret never
crosses the wire, and a peer that cannot prove it is refused with ``unauthorized`` before it
learns a thing. A hello that carries a token (the old handshake) is refused with
``protocol_error`` saying so. Then this session streams this node's own agents
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

What a peer may ask is bounded by this node's own rules, so a stolen secret is not the whole
system: the forwarded caller must pass this node's call rules (``permissions``) for the
capability, its idempotency key must be that caller's (so an agent's key cache cannot answer
it with another caller's outcome), both ``unauthorized``; and a (task id, attempt) already in
flight here, from another link or of this node's own unfinished tasks, is refused as not
delivered (``details.taken``), nothing touched: a link may only touch attempts it started.
Each forward is written to the audit log (event ``forward``) when one is kept.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from reach.cluster import handshake
from reach.cluster.feed import Outbound, frames, local
from reach.cluster.link import UNTOLD
from reach.core import counts
from reach.core.agents import AgentRecord
from reach.core.keys import in_scope
from reach.errors import InvalidParams, ProtocolError, ReachError, Unauthorized, Unavailable
from reach.gateway.audit import Audit
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

    def abandon(self, tell: bool = True) -> None:
        """The peer gave the attempt up (``tell``: the agent is told to stop it) or went away
        (not told: the task's new owner sends it back to this agent, whose key cache knows
        it); the slot is freed either way."""
        if self._end():
            link = self.record.link
            if link is not None:
                link.cancel(*self.key, tell=tell)
            if not tell:  # (the peer may still ask for it to be stopped: ``stop`` later)
                untold = self.session.untold
                untold[self.key] = self.record
                if len(untold) > UNTOLD:
                    untold.popitem(last=False)

    def _end(self) -> bool:
        if self.done:
            return False
        self.done = True
        self.session.relays.pop(self.key, None)
        self.session.forwarded.pop(self.key, None)
        self.record.give(self.capability)
        self.session.services.gateway.slot_freed(self.record)
        return True


class PeerSession(Session):
    """A peer coordinator's link here: this node's agents out, forwarded attempts in."""

    def __init__(self, services: Services, ws: ServerConnection) -> None:
        super().__init__(services, ws)
        self.node: str | None = None
        self.relays: dict[tuple[str, int], Relay] = {}
        # attempts the peer gave up untold: its agent, to tell should the peer ask (``stop``)
        self.untold: OrderedDict[tuple[str, int], AgentRecord] = OrderedDict()
        # every link's attempts in flight here (shared through the node): whose each is
        self.forwarded: dict[tuple[str, int], object] = (
            {} if services.node is None else services.node.forwarded)

    async def run(self, hello: p.Hello) -> None:
        sv = self.services
        node = sv.node
        refusal = await self._handshake(hello)
        if refusal is not None:
            await refuse(self.ws, refusal)
            await self.out.aclose()
            return
        assert node is not None  # (the handshake refuses a node that takes no peer links)
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
                relay.abandon(tell=False)
            await self.out.aclose()

    async def _handshake(self, hello: p.Hello) -> ReachError | None:
        """Challenge the peer and check its proof (reach.cluster.handshake); None when it
        proved it knows the peer secret, else the refusal to send it."""
        sv = self.services
        node = sv.node
        if node is None:
            return Unauthorized("peer link refused: this node takes no peer links", role="peer")
        if hello.token is not None or hello.nonce is None:
            return ProtocolError(
                "peer link refused: the peer hello carries a token (or no nonce); peers prove "
                "the peer secret by challenge-response and never send it (docs/protocol.md "
                "§14): upgrade that node", role="peer", handshake="challenge-response")
        if not hello.node or hello.node == sv.node_id:
            same = hello.node == sv.node_id
            extra = {"proof": handshake.mac(node.token, "same-node", sv.node_id, sv.node_id,
                                            hello.nonce, "")} if same else {}
            return ProtocolError(
                f"a peer hello must name its own node, not {hello.node!r} (this node is "
                f"{sv.node_id!r})", role="peer", same_node=same, **extra)
        address = str(self.ws.remote_address[0]) if self.ws.remote_address else ""
        waiting = node.handshaking
        if waiting.get(address, 0) >= sv.settings.max_pending_per_address:
            return Unavailable("too many peer handshakes from this address at once",
                               role="peer")
        nonce = handshake.new_nonce()
        self.out.post(p.dump(wp.Challenge(
            node=sv.node_id, nonce=nonce, proof=handshake.mac(
                node.token, "holder", hello.node, sv.node_id, hello.nonce, nonce))))
        refused = Unauthorized("peer link refused: the peer did not prove it knows the "
                               "cluster's peer secret (Settings.peer_token, else the admin "
                               "token)", role="peer")
        counts.add(waiting, address)
        try:
            async with asyncio.timeout(sv.settings.hello_timeout):
                proof = wp.parse_proof(await self.ws.recv())
        except (TimeoutError, ConnectionClosed, ProtocolError, InvalidParams):
            return refused
        finally:
            counts.drop(waiting, address)
        if not handshake.proves(proof.proof, node.token, "dialer", hello.node, sv.node_id,
                                hello.nonce, nonce):
            return refused
        return None

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
                relay.abandon(tell=frame.stop)
            elif frame.stop:  # given up untold before (a timeout): its agent is told now
                record = self.untold.pop(key, None)
                if record is not None and record.link is not None:
                    record.link.cancel(*key, tell=True)
            return
        if key in self.relays:
            raise ProtocolError(f"attempt {frame.attempt} of task {frame.task_id!r} is "
                                f"already forwarded here", type="forward")
        sv = self.services
        audit = sv.gateway.audit
        refusal = self._foreign(frame) or self._refusal(frame)
        if refusal is not None:
            if audit is not None:
                record = sv.registry.by_id.get(frame.agent_id)
                self._audit(audit, frame, None if record is None else record.name,
                            refusal.code)
            self.out.post(error_frame(refusal, task_id=frame.task_id, attempt=frame.attempt))
            return
        record = sv.registry.by_id[frame.agent_id]
        link = record.link
        assert link is not None  # (checked by _refusal)
        if audit is not None:
            self._audit(audit, frame, record.name, "accepted")
        relay = self.relays[key] = Relay(self, key, record, frame.capability)
        self.forwarded[key] = self
        record.take(frame.capability)
        work = Work(frame.task_id, frame.attempt, frame.capability, frame.params,
                    frame.idempotency_key, frame.trace_id, frame.caller, frame.parent_task_id,
                    frame.traceparent, frame.deadline_ms)
        if not link.deliver(work, relay):
            relay.resolve("undelivered")

    def _foreign(self, frame: wp.Forward) -> ReachError | None:
        """Why ``frame`` names work that is not this link's to send (None: it is its own):
        an attempt in flight here from another link or of this node's own tasks, or an
        idempotency key scoped to another caller. Nothing in flight is touched."""
        sv = self.services
        task_id, attempt = frame.task_id, frame.attempt
        if (task_id, attempt) in self.forwarded or task_id in sv.gateway.book.live:
            # Not delivered (so a node that took the task over waits and tries again, rather
            # than fail it): the attempt in flight here keeps its delivery and its answer.
            return Unavailable(f"attempt {attempt} of task {task_id!r} is in flight at node "
                               f"{sv.node_id} already, not from this link: a peer may forward "
                               f"only attempts it started", link="undelivered",
                               task_id=task_id, taken=True)
        if not in_scope(frame.caller, frame.idempotency_key, task_id):
            return Unauthorized(f"the idempotency key of task {task_id!r} is not caller "
                                f"{frame.caller!r}'s: keys are private to their caller",
                                task_id=task_id, answer=True)
        return None

    def _refusal(self, frame: wp.Forward) -> ReachError | None:
        """Why this node cannot pass ``frame`` on to its agent now (None: it can): not here,
        not online, not declared, not permitted to the forwarded caller by this node's call
        rules (``unauthorized``), or no free slot (``details.full``)."""
        sv = self.services
        record = sv.registry.by_id.get(frame.agent_id)
        here = sv.node_id
        why = None
        if record is None or not local(record):
            why = f"no agent {frame.agent_id!r} is held at node {here}"
        elif record.link is None or not record.reachable or record.draining:
            why = f"agent {record.name!r} is not online at node {here} ({record.state.value})"
        elif (cap := record.capabilities.get(frame.capability)) is None:
            why = f"agent {record.name!r} does not declare {frame.capability!r}"
        elif not sv.trust.calls.allows(frame.caller, frame.capability, cap.spec.scope):
            # The peer vouches for its caller's name; what that caller may call is this
            # node's word, as for its own callers (a final answer: no fail-over, no fault).
            return Unauthorized(f"caller {frame.caller!r} may not use {frame.capability!r} "
                                f"at node {here}", capability=frame.capability,
                                caller=frame.caller, answer=True)
        elif not record.room(frame.capability):
            # ``full``: the agent is well, only busy (its slots are shared with this node's
            # callers and every peer's): the peer waits or fails over without a fault.
            return Unavailable(f"agent {record.name!r} has no free slot for "
                               f"{frame.capability!r}", link="undelivered",
                               agent_id=frame.agent_id, full=True)
        if why is not None:
            return Unavailable(why, link="undelivered", agent_id=frame.agent_id)
        return None

    def _audit(self, audit: Audit, frame: wp.Forward, agent: str | None,
               decision: str) -> None:
        audit.forwarded(self.node or "", frame.caller, frame.capability, frame.task_id,
                        frame.trace_id, frame.attempt, agent, decision, frame.params)
