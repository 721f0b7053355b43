"""An agent's websocket session: registration, heartbeats, and the deliveries in flight to it.

``AgentSession`` is the websocket implementation of ``ports.AgentLink``: the gateway hands it
``Work`` and a ``Reply``; it sends an ``invoke`` frame and reports the agent's ``ack``,
``chunk``, ``result`` or ``error`` (or the connection's loss) to that reply.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic_core import from_json
from websockets.asyncio.server import ServerConnection

from reach.core import names
from reach.core.schemas import SchemaError, compile_schema
from reach.errors import InvalidParams, ProtocolError, ReachError, Unavailable
from reach.ports import Reply, Work
from reach.server.services import Services
from reach.server.session import Session, refuse
from reach.wire import protocol as p

log = logging.getLogger("reach.channel")
_Welcome = p.unchecked(p.Welcome)
_Invoke = p.unchecked(p.Invoke)


class AgentSession(Session):
    """One connected agent: registration, heartbeats, and the deliveries in flight to it."""

    def __init__(self, services: Services, ws: ServerConnection) -> None:
        super().__init__(services, ws)
        self.record: Any = None
        self.pending: dict[tuple[str, int], Reply] = {}
        self._closer: asyncio.Task[None] | None = None

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
            registration = sv.registry.register(
                agent_id=agent_id, name=reg.name, version=reg.version,
                max_concurrency=reg.max_concurrency, specs=reg.capabilities, link=self,
                now=sv.clock.wall(), instance=reg.instance)
        except (SchemaError, ValueError) as exc:
            await refuse(self.ws, InvalidParams(f"registration refused: {exc}"))
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
        self.out.post(p.dump(_Welcome(
            agent_id=agent_id, heartbeat_interval=sv.settings.heartbeat_interval,
            max_frame_bytes=sv.settings.max_frame_bytes,
            capabilities=registration.normalized, warnings=registration.warnings)))
        await sv.identities.remember(registration.record, reg.capabilities)
        try:
            await self._frames(self._on_frame)
        finally:
            for delivery in list(self.pending.values()):
                delivery.resolve("lost")
            self.pending.clear()
            record = self.record
            if record.link is self:
                sv.registry.disconnected(record, sv.clock.wall())
            await self.out.aclose()

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
                raise InvalidParams(f"registration refused: {exc}") from None
        sv.trust.check_serve(reg.name, canonical)
        # Compiling a schema is CPU work that grows with its size (~3 ms per KiB). The size
        # limit is what bounds it; a worker thread shares the GIL, but lets the loop in
        # between bytecodes (the registry then finds each validator in the cache).
        await asyncio.to_thread(precompile, [c.params for c in reg.capabilities],
                                s.max_schema_bytes)

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

    def cancel(self, task_id: str, attempt: int) -> None:
        self.pending.pop((task_id, attempt), None)

    async def close(self, reason: str) -> None:
        await self.ws.close(1000, reason)

    # ------------------------------------------------------------ frames from the agent

    def _on_frame(self, frame: Any) -> None:
        kind = frame.type
        sv = self.services
        if kind == "heartbeat":
            sv.registry.heartbeat(
                self.record, sv.clock.wall(), inflight=frame.inflight,
                queue_depth=frame.queue_depth, load=frame.load)
        elif kind == "result":
            delivery = self.pending.pop((frame.task_id, frame.attempt), None)
            if delivery is not None:
                delivery.resolve("ok", frame.result)
        elif kind == "ack":
            delivery = self.pending.get((frame.task_id, frame.attempt))
            if delivery is not None:
                delivery.ack()
        elif kind == "error":
            if frame.task_id is None:
                log.warning("agent %r reports: %r", self.record.name, frame.error.message)
                return
            delivery = self.pending.pop((frame.task_id, frame.attempt), None)
            if delivery is not None:
                delivery.resolve("error", frame.error.model_dump())
        elif kind == "chunk":
            delivery = self.pending.get((frame.task_id, frame.attempt))
            if delivery is not None:
                delivery.ack()
                delivery.chunk(frame.seq, frame.data)
        elif kind == "deregister":
            sv.registry.deregister(self.record, sv.clock.wall())
        else:
            raise ProtocolError(f"frame type {kind!r} is not accepted from an agent")


def too_many_capabilities(count: int, limit: int) -> InvalidParams:
    return InvalidParams(
        f"registration refused: {count} capabilities, over the limit of {limit} per agent "
        f"(max_capabilities); split them over several agents", limit=limit)


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
