"""An agent's websocket session: registration, heartbeats, and the deliveries in flight to it.

``AgentSession`` is the websocket implementation of ``ports.AgentLink``: the gateway hands it
``Work`` and a ``Reply``; it sends an ``invoke`` frame and reports the agent's ``ack``,
``chunk``, ``result`` or ``error`` (or the connection's loss) to that reply.

Answers that match no delivery in flight are not dropped in silence (docs/protocol.md §3):
one for an attempt the coordinator gave up (timed out, never acknowledged in time, a hedge
that lost) gets an ``error`` frame with code ``timeout`` and that task id and attempt, once,
so the agent can stop the work; one that names a task in flight here with another attempt
number gets a ``protocol_error`` naming the attempt expected. A deliberate answer gets the
agent's name in its details (``agent``) when the agent did not put it there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from pydantic_core import from_json
from websockets.asyncio.server import ServerConnection

from reach.core import names
from reach.core.results import compile_returns
from reach.core.schemas import SchemaError, compile_schema
from reach.errors import InvalidParams, ProtocolError, ReachError, ReachTimeout, Unavailable
from reach.gateway.delivery import Delivery
from reach.ports import Reply, Work
from reach.server.services import Services
from reach.server.session import Session, error_frame, refuse
from reach.wire import protocol as p

log = logging.getLogger("reach.channel")
_Welcome = p.unchecked(p.Welcome)
_Invoke = p.unchecked(p.Invoke)
GIVEN_UP = 1024  # (task, attempt) pairs one session remembers as given up, for late answers
AGENT_SENDS = ("heartbeat", "ack", "chunk", "result", "error", "deregister", "probe_result",
               "register")
_Probe = p.unchecked(p.Probe)
_Cancel = p.unchecked(p.Cancel)


class AgentSession(Session):
    """One connected agent: registration, heartbeats, and the deliveries in flight to it."""

    def __init__(self, services: Services, ws: ServerConnection) -> None:
        super().__init__(services, ws)
        self.record: Any = None
        self.pending: dict[tuple[str, int], Reply] = {}
        # attempts the gateway stopped waiting for → why, or None once the agent was told
        self.given_up: OrderedDict[tuple[str, int], str | None] = OrderedDict()
        self._closer: asyncio.Task[None] | None = None
        self._updating: asyncio.Task[None] | None = None  # a registration update (§15)
        self._probe_every: float | None = None

    async def run(self, reg: p.Register) -> None:
        sv = self.services
        try:
            await self._admit(reg)
            agent_id = sv.identities.identity(reg.name)
            known = sv.registry.by_id.get(agent_id)
            previous = known.link if known is not None else None
            if isinstance(previous, AgentSession) and previous is not self and \
                    not sv.trust.may_take_over(old_instance=known.instance if known else None,
                                               new_instance=reg.instance):
                raise Unavailable(
                    f"an agent named {reg.name!r} is connected from another process; in open "
                    f"mode (no tokens) only that same process may take its name over. Stop "
                    f"the other one, or wait: its connection is dropped once it stops "
                    f"answering keepalive pings", agent=reg.name)
            if previous is not None and not isinstance(previous, AgentSession) and \
                    known is not None and known.kind != "peer":
                # an adapter the operator attached (reach.attach) holds the name
                raise Unavailable(
                    f"the name {reg.name!r} belongs to a {known.kind if known else ''} agent "
                    f"the coordinator drives (attached by its operator); pick another name, "
                    f"or detach that one first (reach.detach({reg.name!r}))", agent=reg.name)
            registration = sv.registry.register(
                agent_id=agent_id, name=reg.name, version=reg.version,
                max_concurrency=reg.max_concurrency, specs=reg.capabilities, link=self,
                now=sv.clock.wall(), instance=reg.instance,
                heartbeat_interval=reg.heartbeat_interval)
        except (SchemaError, ValueError) as exc:
            await refuse(self.ws, InvalidParams(f"registration refused: {exc}",
                                                reason=str(exc)))
            await self.out.aclose()
            return
        except ReachError as exc:
            await refuse(self.ws, exc)
            await self.out.aclose()
            return
        if isinstance(previous, AgentSession) and previous is not self:
            previous.replaced()
        self.record = registration.record
        for warning in registration.warnings:
            log.warning("agent %s: %s", reg.name, warning)
        probes = sv.gateway.probes
        # Only agents that said they answer probes are sent them (v1 agents never are).
        probe_every = probes.track(self.record, self, reg.probe_interval) if reg.probes \
            else None
        self._probe_every = probe_every
        self._welcome(registration)
        await sv.identities.remember(registration.record, reg.capabilities)
        try:
            await self._frames(self._on_frame)
        finally:
            if self._updating is not None:
                self._updating.cancel()
            for delivery in list(self.pending.values()):
                delivery.resolve("lost")
            self.pending.clear()
            record = self.record
            probes.forget(record, self)
            if record.link is self:
                sv.registry.disconnected(record, sv.clock.wall())
            await self.out.aclose()

    def _welcome(self, registration: Any) -> None:
        sv = self.services
        self.out.post(p.dump(_Welcome(
            agent_id=self.record.agent_id, heartbeat_interval=self.record.liveness.interval,
            max_frame_bytes=sv.settings.max_frame_bytes,
            capabilities=registration.normalized, warnings=registration.warnings,
            probe_interval=self._probe_every)))

    def _update(self, reg: p.Register) -> None:
        """A ``register`` frame on an open connection: the agent's capabilities change in
        place (docs/protocol.md §15). Updates are applied in the order they came."""
        self._updating = asyncio.get_running_loop().create_task(
            self._reregister(reg, self._updating), name=f"reach-update {self.record.name}")

    async def _reregister(self, reg: p.Register, before: asyncio.Task[None] | None) -> None:
        """Check the update as a first registration is checked, then register the same
        record again with this link: counters, breaker, liveness and the calls in flight
        stay; new calls are routed by the new set. Answered with ``welcome``, or an
        ``error`` whose ``details.type`` is ``register`` (the connection stays)."""
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        sv, record = self.services, self.record
        try:
            if reg.name != record.name:
                raise InvalidParams(
                    f"this connection registered agent {record.name!r}, and an update keeps "
                    f"the name; to serve as {reg.name!r}, open another connection")
            await self._admit(reg)
            if record.link is not self:  # replaced by a newer connection meanwhile
                return
            registration = sv.registry.register(
                agent_id=record.agent_id, name=record.name, version=reg.version,
                max_concurrency=reg.max_concurrency, specs=reg.capabilities, link=self,
                now=sv.clock.wall(), instance=record.instance,
                heartbeat_interval=reg.heartbeat_interval)
        except (SchemaError, ValueError) as exc:
            self.out.post(error_frame(InvalidParams(f"update refused: {exc}", reason=str(exc),
                                                    type="register")))
            return
        except ReachError as exc:
            exc.details.setdefault("type", "register")
            self.out.post(error_frame(exc))
            return
        self.record = registration.record
        self._welcome(registration)
        await sv.identities.remember(registration.record, reg.capabilities)

    async def _admit(self, reg: p.Register) -> None:
        """Everything a registration must pass before it touches the registry: the token, the
        size of the declaration, the serve rules, and schemas that compile (off the loop)."""
        sv = self.services
        s = sv.settings
        sv.trust.authenticate(reg.token, reg.name, "agent")
        if len(reg.capabilities) > s.max_capabilities:
            raise too_many_capabilities(len(reg.capabilities), s.max_capabilities)
        canonical = []
        for spec in reg.capabilities:
            try:
                canonical.append((names.normalize(spec.name), spec.scope))
            except ValueError as exc:
                raise InvalidParams(f"registration refused: {exc}", capability=spec.name,
                                    reason=str(exc)) from None
        sv.trust.check_serve(reg.name, canonical)
        # Compiling a schema is CPU work that grows with its size (~3 ms per KiB). The size
        # limit is what bounds it; a worker thread shares the GIL, but lets the loop in
        # between bytecodes (the registry then finds each validator in the cache).
        await asyncio.to_thread(precompile_named, reg.capabilities, s.max_schema_bytes)

    def replaced(self) -> None:
        """A newer connection registered under our name: this one is stale."""
        for delivery in list(self.pending.values()):
            delivery.resolve("lost")
        self.pending.clear()
        # Owned by this session (a reference keeps it alive); it ends the session's reader.
        self._closer = asyncio.get_running_loop().create_task(
            self.ws.close(4000, "replaced by a newer connection of the same agent"))

    # ------------------------------------------------------------ ports.AgentLink

    def deliver(self, work: Work, reply: Reply) -> bool:
        """Send an invoke frame; False if this connection can no longer carry it."""
        if not self.out.post(p.dump(_Invoke(
                task_id=work.task_id, attempt=work.attempt, capability=work.capability,
                params=work.params, idempotency_key=work.idempotency_key,
                trace_id=work.trace_id, parent_task_id=work.parent_task_id,
                traceparent=work.traceparent, deadline_ms=work.deadline_ms,
                caller=work.caller))):
            return False
        self.pending[(work.task_id, work.attempt)] = reply
        return True

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        """The gateway gave the attempt up (it timed out, a hedge lost, the task was
        cancelled): the agent is told to stop it (a ``cancel`` frame; the SDK cancels the
        handler), and its answer, if one still comes, is a late one."""
        key = (task_id, attempt)
        reply = self.pending.pop(key, None)
        if reply is not None:  # still in flight here, yet the gateway is done with it
            self.given_up[key] = _why(reply) or "cancelled"  # (an answer may follow)
            if len(self.given_up) > GIVEN_UP:
                self.given_up.popitem(last=False)
        elif self.given_up.get(key) is None:  # answered, or lost with the connection
            return
        if tell:  # (also for one given up untold before: a timeout, once its task ended)
            self.out.post(p.dump(_Cancel(task_id=task_id, attempt=attempt)))

    async def close(self, reason: str) -> None:
        await self.ws.close(1000, reason)

    def probe(self, probe_id: int) -> bool:
        """Send a ``probe`` frame (gateway.probing times the answer); False once closing."""
        return self.out.post(p.dump(_Probe(id=probe_id)))

    # ------------------------------------------------------------ frames from the agent

    def _on_frame(self, frame: Any) -> None:
        kind = frame.type
        sv = self.services
        if kind == "heartbeat":
            sv.registry.heartbeat(
                self.record, sv.clock.wall(), inflight=frame.inflight,
                queue_depth=frame.queue_depth, load=frame.load)
        elif kind == "result":
            delivery = self._answering(frame, final=True)
            if delivery is not None:
                delivery.resolve("ok", frame.result)
        elif kind == "ack":
            delivery = self._answering(frame, final=False)
            if delivery is not None:
                delivery.ack()
        elif kind == "error":
            if frame.task_id is None:
                log.warning("agent %r reports: %r", self.record.name, frame.error.message)
                return
            delivery = self._answering(frame, final=True)
            if delivery is not None:
                error = frame.error.model_dump()
                details = error["details"]
                if details.get("answer") is True and "agent" not in details:
                    details["agent"] = self.record.name  # as the SDK does: callers rely on it
                delivery.resolve("error", error)
        elif kind == "chunk":
            delivery = self._answering(frame, final=False)
            if delivery is not None:
                delivery.ack()
                delivery.chunk(frame.seq, frame.data)
        elif kind == "register":
            self._update(frame)
        elif kind == "deregister":
            sv.registry.deregister(self.record, sv.clock.wall(), by="agent")
        elif kind == "probe_result":
            if not sv.gateway.probes.answered(self.record, self, frame.id, frame.ok,
                                              frame.detail):
                raise ProtocolError(
                    f"probe_result for probe {frame.id}, which is not awaited from this agent "
                    f"(never sent, or answered already); answer each probe once, with its id",
                    type="probe_result", probe=frame.id)
        else:
            raise ProtocolError(f"frame type {kind!r} is not accepted from an agent; an agent "
                                f"sends {', '.join(AGENT_SENDS)}", type=kind,
                                expected=list(AGENT_SENDS))

    def _answering(self, frame: Any, *, final: bool) -> Reply | None:
        """The delivery an ``ack``/``chunk``/``result``/``error`` frame answers (taken out of
        ``pending`` when ``final``), or None after telling the agent why there is none."""
        key = (frame.task_id, frame.attempt)
        delivery = self.pending.pop(key, None) if final else self.pending.get(key)
        if delivery is not None:
            why = _why(delivery)
            if why is None:
                return delivery
            # It timed out just now; the gateway has not yet said so (cancel).
            self.pending.pop(key, None)
            self.given_up[key] = why
        if key in self.given_up:
            why = self.given_up[key]
            if why is not None:  # told once: later frames of that attempt go unanswered
                self.given_up[key] = None
                self.out.post(error_frame(late(frame.task_id, frame.attempt, frame.type, why),
                                          task_id=frame.task_id, attempt=frame.attempt))
            return None
        expected = sorted(a for t, a in self.pending if t == frame.task_id)
        if expected:
            raise ProtocolError(
                f"{frame.type!r} for task {frame.task_id!r} names attempt {frame.attempt}, "
                f"but the attempt in flight at this agent is {expected[0]}; echo the "
                f"invoke's task_id and attempt", type=frame.type, task_id=frame.task_id,
                attempt=frame.attempt, expected=expected[0])
        # Nothing of that task is in flight here: answered already, lost with an earlier
        # connection (an agent may answer it on its new one; the SDK does not), or given up
        # long ago. Ignored.
        return None


def _why(reply: Reply) -> str | None:
    """Why the gateway no longer waits for a delivery (``undelivered``, ``timeout``,
    ``cancelled``), or None while it still does (as far as can be seen from here)."""
    if not isinstance(reply, Delivery) or reply.outcome is None:
        return None
    kind = reply.outcome[0]
    return kind if kind in ("undelivered", "timeout") else "cancelled"


def late(task_id: str, attempt: int, frame_type: str, why: str) -> ReachTimeout:
    """The notice for an answer to an attempt the coordinator has given up."""
    because = {
        "undelivered": "no ack, chunk or outcome came within the ack timeout, so it was "
                       "treated as never delivered and may run elsewhere",
        "timeout": "no outcome came within its completion timeout (or the caller's "
                   "deadline)",
        "cancelled": "the coordinator stopped waiting for it (another attempt answered "
                     "first, or the task ended)",
    }[why]
    return ReachTimeout(
        f"attempt {attempt} of task {task_id} was given up before this {frame_type!r} "
        f"arrived: {because}; the answer is discarded, stop any work left on it",
        reason=why, late=frame_type)


def too_many_capabilities(count: int, limit: int) -> InvalidParams:
    return InvalidParams(
        f"registration refused: {count} capabilities, over the limit of {limit} per agent "
        f"(max_capabilities); split them over several agents", limit=limit,
        reason=f"{count} capabilities, over the limit of {limit}")


def oversize_register(raw: str | bytes, limit: int) -> InvalidParams | None:
    """A large first frame that is a ``register`` over the capability limit, found by a plain
    JSON decode (~3 ms for 10,000 capabilities) before the frame is validated (~9 µs per
    capability: 90 ms of loop for a refusal that was certain from the count)."""
    if len(raw) < 64 * 1024:
        return None
    try:
        obj = from_json(raw)
    except ValueError:
        return None  # the parser says what is wrong
    caps = obj.get("capabilities") if isinstance(obj, dict) and \
        obj.get("type") == "register" else None
    if isinstance(caps, list) and len(caps) > limit:
        return too_many_capabilities(len(caps), limit)
    return None


def precompile(schemas: list[dict[str, Any]], max_bytes: int) -> None:
    """Compile every schema into the shared cache (run on a worker thread)."""
    for schema in schemas:
        compile_schema(schema, max_bytes=max_bytes)


def precompile_named(specs: list[p.CapabilitySpec], max_bytes: int) -> None:
    """``precompile`` for a registration: a schema that does not compile is refused naming
    its capability (``details.capability``) and what is wrong (``details.reason``)."""
    for spec in specs:
        try:
            compile_schema(spec.params, max_bytes=max_bytes)
            compile_returns(spec.returns, max_bytes=max_bytes)
        except SchemaError as exc:
            raise InvalidParams(f"registration refused: {exc}", capability=spec.name,
                                reason=str(exc)) from None
