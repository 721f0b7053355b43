"""The websocket edge: one server, two kinds of session (agent, caller), frames in and out.

The first frame decides the role: ``register`` makes an agent session, ``hello`` a caller session.
A bad frame gets an ``error`` frame (code ``protocol_error``) and the connection carries on; an
oversize frame closes that one connection (websocket code 1009). Nothing here decides policy:
sessions hand frames to the registry and the gateway and post what they answer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import from_json
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from reach.core import counts, names
from reach.core.schemas import SchemaError, compile_schema
from reach.core.tasks import SubmitRequest, TaskState
from reach.core.trust import may_read
from reach.errors import InvalidParams, ProtocolError, ReachError, Unavailable
from reach.ports import Reply, Work
from reach.server.outbox import Outbox
from reach.wire import protocol as p

if TYPE_CHECKING:
    from reach.reach import Reach

log = logging.getLogger("reach.channel")
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013
YIELD_EVERY = 16  # frames one session reads before it lets the loop run others
MAX_SESSION_WORK = 8  # status/result answers one caller session prepares at a time
LAG_LIMIT = 0.002  # loop lag (s) past which heavy callers' sessions pause their reading
HEAVY_CALLER = 16  # unfinished tasks that make a caller heavy
MAX_UNACKED = 1024  # submits one caller session has read and not yet seen committed
SHARED_UNACKED = 32  # the same while other callers have work in flight
DEFER_ACK = 0.05  # how long a `defer_ack` submit's acknowledgement may wait for its outcome


def error_frame(err: ReachError, *, id: int | None = None, task_id: str | None = None) -> str:
    return p.dump(p.Error(id=id, task_id=task_id, error=p.WireError(**err.to_wire())))


class Channel:
    """Accepts connections for one coordinator and runs a session for each."""

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.sessions: set[_Session] = set()
        self.open = 0  # connections being handled (sessions and those still before hello)
        self.lag = 0.0  # seconds the loop runs behind (``watch_lag``)
        self._pending: dict[str, int] = {}  # address → connections not yet past hello

    async def watch_lag(self, period: float = 0.005) -> None:
        """Keep ``lag``: how late the loop runs a timer, a sign it has more work than it can
        do at once (then the heaviest callers are read more slowly, see ``_backlog``)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + period
            await asyncio.sleep(period)
            late = loop.time() - due
            # Up at once, down gently: one quiet turn does not end a flood.
            self.lag = late if late > self.lag else self.lag * 0.5 + late * 0.5

    @property
    def full(self) -> bool:
        return self.open >= self.reach.settings.max_connections

    async def handle(self, ws: ServerConnection) -> None:
        self.open += 1
        try:
            await self._handle(ws)
        finally:
            self.open -= 1

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.reach.settings
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
        oversize = _oversize_register(raw, s.max_capabilities)
        if oversize is not None:
            await refuse(ws, oversize)
            return
        try:
            first = p.parse(raw)
        except ProtocolError as exc:
            await refuse(ws, exc)
            return
        session: _Session
        if isinstance(first, p.Register):
            session = AgentSession(self.reach, ws)
        elif isinstance(first, p.Hello):
            session = CallerSession(self.reach, ws)
        elif isinstance(first, p.AdminHello):
            from reach.server.admin import (
                AdminSession,  # here: admin builds on this module's sessions
            )

            session = AdminSession(self.reach, ws)
        else:
            await refuse(ws, ProtocolError(
                f"the first frame must be 'register' (agents), 'hello' (callers) or 'admin' "
                f"(operators), not {first.type!r}"))
            return
        self.sessions.add(session)
        try:
            await session.run(first)
        finally:
            self.sessions.discard(session)


async def refuse(ws: ServerConnection, err: ReachError) -> None:
    try:
        await ws.send(error_frame(err))
        # A close reason may be 123 bytes: cut by bytes, not characters (non-ASCII text
        # cut at 120 characters made the close itself fail, and the connection end 1011).
        await ws.close(POLICY_VIOLATION,
                       err.message.encode()[:120].decode("utf-8", errors="ignore"))
    except ConnectionClosed:
        pass


class _Session:
    def __init__(self, reach: Reach, ws: ServerConnection) -> None:
        self.reach = reach
        self.ws = ws
        peer = ":".join(map(str, ws.remote_address[:2])) if ws.remote_address else "?"
        self.out = Outbox(ws, name=f"reach-session-out {peer}",
                          limit=reach.settings.max_outbox_bytes)

    async def _frames(self, on_frame: Callable[[Any], None]) -> None:
        """Read frames until the socket closes; a bad one is answered, not fatal."""
        read = 0
        try:
            async for raw in self.ws:
                read += 1
                if not read % YIELD_EVERY:
                    # Frames already buffered are read without a pause: one peer's burst
                    # must not hold the loop from every other connection.
                    await asyncio.sleep(0)
                try:
                    frame = p.parse(raw)
                except ProtocolError as exc:
                    # Echo the request id when there is one: the caller is waiting on it.
                    self.out.post(error_frame(exc, id=p.request_id(raw)))
                    continue
                try:
                    on_frame(frame)
                except ReachError as exc:
                    self.out.post(error_frame(exc, id=getattr(frame, "id", None)))
                if self._held():
                    await self._backlog()
        except ConnectionClosed:
            pass


    def _held(self) -> bool:
        """Whether ``_backlog`` may have to wait (a cheap test made after every frame)."""
        return False

    async def _backlog(self) -> None:
        """Before the next frame: wait while this session's own work in progress is at its
        bound (the peer then waits on its socket, not everyone else on the loop)."""


class AgentSession(_Session):
    """One connected agent: registration, heartbeats, and the deliveries in flight to it."""

    def __init__(self, reach: Reach, ws: ServerConnection) -> None:
        super().__init__(reach, ws)
        self.record: Any = None
        self.pending: dict[tuple[str, int], Reply] = {}
        self._closer: asyncio.Task[None] | None = None

    async def run(self, reg: p.Register) -> None:
        reach = self.reach
        try:
            await self._admit(reg)
            agent_id = reach.identity(reg.name)
            known = reach.registry.by_id.get(agent_id)
            previous = known.link if known is not None else None
            if isinstance(previous, AgentSession) and previous is not self and \
                    not reach.trust.may_take_over(old_instance=known.instance if known else None,
                                                  new_instance=reg.instance):
                raise Unavailable(
                    f"an agent named {reg.name!r} is connected from another process; in open "
                    f"mode (no tokens) only that same process may take its name over. Stop "
                    f"the other one, or wait: its connection is dropped once it stops "
                    f"answering keepalive pings", agent=reg.name)
            registration = reach.registry.register(
                agent_id=agent_id, name=reg.name, version=reg.version,
                max_concurrency=reg.max_concurrency, specs=reg.capabilities, link=self,
                now=reach.clock.wall(), instance=reg.instance)
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
        self.out.post(p.dump(p.Welcome(
            agent_id=agent_id, heartbeat_interval=reach.settings.heartbeat_interval,
            max_frame_bytes=reach.settings.max_frame_bytes,
            capabilities=registration.normalized, warnings=registration.warnings)))
        await reach.remember_agent(registration.record, reg)
        try:
            await self._frames(self._on_frame)
        finally:
            for delivery in list(self.pending.values()):
                delivery.resolve("lost")
            self.pending.clear()
            record = self.record
            if record.link is self:
                reach.registry.disconnected(record, reach.clock.wall())
            await self.out.aclose()

    async def _admit(self, reg: p.Register) -> None:
        """Everything a registration must pass before it touches the registry: the token, the
        size of the declaration, the serve rules, and schemas that compile (off the loop)."""
        reach = self.reach
        s = reach.settings
        reach.trust.authenticate(reg.token, reg.name, "agent")
        if len(reg.capabilities) > s.max_capabilities:
            raise too_many_capabilities(len(reg.capabilities), s.max_capabilities)
        canonical = []
        for spec in reg.capabilities:
            try:
                canonical.append((names.normalize(spec.name), spec.scope))
            except ValueError as exc:
                raise InvalidParams(f"registration refused: {exc}") from None
        reach.trust.check_serve(reg.name, canonical)
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

    # called by the gateway
    # ------------------------------------------------------------ ports.AgentLink

    def deliver(self, work: Work, reply: Reply) -> bool:
        """Send an invoke frame; False if this connection can no longer carry it."""
        if not self.out.post(p.encode(
                "invoke", task_id=work.task_id, attempt=work.attempt,
                capability=work.capability, params=work.params,
                idempotency_key=work.idempotency_key, trace_id=work.trace_id,
                parent_task_id=work.parent_task_id, traceparent=work.traceparent,
                deadline_ms=work.deadline_ms, caller=work.caller)):
            return False
        self.pending[(work.task_id, work.attempt)] = reply
        return True

    def cancel(self, task_id: str, attempt: int) -> None:
        self.pending.pop((task_id, attempt), None)

    async def close(self, reason: str) -> None:
        await self.ws.close(1000, reason)

    def _on_frame(self, frame: Any) -> None:
        kind = frame.type
        if kind == "heartbeat":
            self.reach.registry.heartbeat(
                self.record, self.reach.clock.wall(), inflight=frame.inflight,
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
            self.reach.registry.deregister(self.record, self.reach.clock.wall())
        else:
            raise ProtocolError(f"frame type {kind!r} is not accepted from an agent")


@dataclass(slots=True)
class _Deferred:
    req_id: int
    task_id: str
    trace_id: str
    acked: bool = False
    answered: bool = False


class CallerSession(_Session):
    """One connected caller: submits, status queries and pushed outcomes."""

    def __init__(self, reach: Reach, ws: ServerConnection) -> None:
        super().__init__(reach, ws)
        self.caller = "anonymous"
        self._work: set[asyncio.Task[None]] = set()
        self._unacked = 0  # submits whose commit is pending
        self._limit = MAX_UNACKED  # the window ``_backlog`` last applied
        self._window: asyncio.Future[None] | None = None
        self._deferred: deque[tuple[float, _Deferred]] = deque()
        self._ack_timer: asyncio.TimerHandle | None = None

    async def run(self, hello: p.Hello) -> None:
        try:
            self.reach.trust.authenticate(hello.token, hello.caller, "caller")
        except ReachError as exc:
            await refuse(self.ws, exc)
            await self.out.aclose()
            return
        self.caller = hello.caller
        self.out.post(p.dump(p.Welcome(role="caller",
                                       heartbeat_interval=self.reach.settings.heartbeat_interval,
                                       max_frame_bytes=self.reach.settings.max_frame_bytes)))
        try:
            await self._frames(self._on_frame)
        finally:
            if self._ack_timer is not None:
                self._ack_timer.cancel()
            for work in list(self._work):
                work.cancel()
            await asyncio.gather(*self._work, return_exceptions=True)
            await self.out.aclose()

    def _on_frame(self, frame: Any) -> None:
        if frame.type == "submit":
            self._on_submit(frame)
        elif frame.type == "status":
            self._spawn(self._status(frame))
        elif frame.type == "result":
            self._spawn(self._await(frame))
        else:
            raise ProtocolError(f"frame type {frame.type!r} is not accepted from a caller")

    def _held(self) -> bool:
        return (len(self._work) >= MAX_SESSION_WORK or self._unacked >= SHARED_UNACKED
                or self.reach.channel.lag > LAG_LIMIT)

    async def _backlog(self) -> None:
        # Each status/result answer may serialize up to a frame's worth of task: a peer asking
        # thousands at once would fill the loop's ready queue ahead of everyone else.
        while len(self._work) >= MAX_SESSION_WORK:
            await asyncio.wait(set(self._work), return_when=asyncio.FIRST_COMPLETED)
        # Submits read but not yet committed: past the window, read no more until half are.
        # A caller sending faster than the store commits would otherwise fill the loop with
        # its tasks, and every other peer's step would wait behind them. The window is
        # narrow only while other callers submit work too: alone, a caller competes with
        # nobody and pipelines as deep as it likes (bench/relay.py at 64 in flight).
        gateway = self.reach.gateway
        contended = gateway.contended(self.caller)
        self._limit = SHARED_UNACKED if contended else MAX_UNACKED
        if self._unacked >= self._limit:
            self._window = asyncio.get_running_loop().create_future()
            await self._window
        # The loop is behind, other callers are submitting, and this caller is one of
        # those keeping it busy: read its next frames a little later. A caller with a few
        # calls in flight is never slowed.
        channel = self.reach.channel
        while contended and channel.lag > LAG_LIMIT and \
                gateway.caller_live.get(self.caller, 0) > HEAVY_CALLER:
            await asyncio.sleep(min(0.05, channel.lag))

    def _committed(self) -> None:
        self._unacked -= 1
        window = self._window
        if window is not None and self._unacked <= self._limit // 2 and not window.done():
            window.set_result(None)

    def _spawn(self, coro: Any) -> None:
        work = asyncio.get_running_loop().create_task(coro)
        self._work.add(work)
        work.add_done_callback(self._work.discard)

    def _on_submit(self, f: p.Submit) -> None:
        # The common path creates no task of its own: acceptance is posted from the commit's
        # completion callback. Only a duplicate known solely to the store needs a coroutine.
        sink = self._chunk_sink(f.id) if f.wait else None
        try:
            admission = self.reach.gateway.accept(SubmitRequest(
                f.capability, f.params, self.caller, f.idempotency_key, f.priority, f.timeout,
                f.max_retries, f.trace_id, f.parent_task_id, f.traceparent, f.intent,
                f.hedge), sink)
        except ReachError as exc:
            self.out.post(error_frame(exc, id=f.id))
            return
        task, commit = admission.task, admission.commit
        if task is None:
            self._spawn(self._late_duplicate(f, admission.lookup or ""))
        elif commit is None:
            self._acknowledge(f, task, admission.duplicate)
        else:
            self._unacked += 1

            def committed(c: asyncio.Future[None]) -> None:
                self._committed()
                self._acknowledge(f, task, admission.duplicate, c)
            commit.add_done_callback(committed)

    async def _late_duplicate(self, f: p.Submit, task_id: str) -> None:
        task = await self.reach.gateway.task(task_id)
        if task is None:
            self.out.post(error_frame(ReachError(
                "the first task of this idempotency key was not found"), id=f.id))
            return
        if f.capability:
            try:
                self.reach.gateway.check_same_work(task, names.normalize(f.capability),
                                                   f.idempotency_key or "")
            except ReachError as exc:
                self.out.post(error_frame(exc, id=f.id))
                return
        self._acknowledge(f, task, True)

    def _acknowledge(self, f: p.Submit, task: Any, duplicate: bool,
                     commit: asyncio.Future[None] | None = None) -> None:
        if commit is not None and (commit.cancelled() or commit.exception() is not None):
            # The store failed: the task was not accepted, so it is not acknowledged.
            why = "cancelled" if commit.cancelled() else repr(commit.exception())
            log.error("submit not committed: %s", why)
            self.out.post(error_frame(ReachError(f"task not accepted: {why}"), id=f.id))
            return
        if f.wait and task.terminal and not duplicate:
            # Done before its commit was: one frame both acknowledges and answers.
            self._post_outcome(task, f.id, accepts=True)
            return
        if f.wait and f.defer_ack and not duplicate:
            self._defer_ack(f, task)
            return
        self.out.post(p.encode("accepted", id=f.id, task_id=task.task_id,
                               trace_id=task.envelope.trace_id, duplicate=duplicate))
        if f.wait:
            self._watch(task.task_id, f.id, task)

    def _defer_ack(self, f: p.Submit, task: Any) -> None:
        """The caller only wants the outcome: if it comes within ``DEFER_ACK`` seconds, one
        frame acknowledges and answers; otherwise ``accepted`` goes out then, as usual.
        Pending acknowledgements share one timer per session (their deadlines are in order)."""
        pending = _Deferred(f.id, task.task_id, task.envelope.trace_id)

        def outcome(done: Any) -> None:
            accepts = not pending.acked
            pending.answered = True
            self._post_outcome(done, f.id, accepts=accepts)

        if not self.reach.gateway.watch(task.task_id, outcome):
            self._post_outcome(task, f.id, accepts=True)
            return
        loop = asyncio.get_running_loop()
        self._deferred.append((loop.time() + DEFER_ACK, pending))
        if self._ack_timer is None:
            self._ack_timer = loop.call_at(self._deferred[0][0], self._ack_due)

    def _ack_due(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._ack_timer = None
        while self._deferred and self._deferred[0][0] <= now:
            _, pending = self._deferred.popleft()
            if not pending.answered:
                pending.acked = True
                self.out.post(p.encode("accepted", id=pending.req_id, task_id=pending.task_id,
                                       trace_id=pending.trace_id, duplicate=False))
        if self._deferred:
            self._ack_timer = loop.call_at(self._deferred[0][0], self._ack_due)

    def _chunk_sink(self, req_id: int) -> Callable[[str, int, Any], None]:
        def sink(task_id: str, seq: int, data: Any) -> None:
            self.out.post(p.encode("chunk", task_id=task_id, attempt=0, id=req_id, seq=seq,
                                   data=data))
        return sink

    def _watch(self, task_id: str, req_id: int, task: Any, accepts: bool = False) -> None:
        if not self.reach.gateway.watch(
                task_id, lambda done: self._post_outcome(done, req_id, accepts)):
            if task is not None and task.terminal:
                self._post_outcome(task, req_id, accepts)
            else:  # every unfinished task is live; this would be a bug, so say it loudly
                log.error("task %s is neither live nor finished", task_id)
                self.out.post(error_frame(Unavailable(
                    f"task {task_id} is not being driven; ask again shortly"), id=req_id,
                    task_id=task_id))

    def _post_outcome(self, task: Any, req_id: int, accepts: bool = False) -> None:
        trace_id = task.envelope.trace_id if accepts else None
        if task.state is TaskState.SUCCEEDED:
            text = p.encode("result", task_id=task.task_id, attempt=0, id=req_id,
                            trace_id=trace_id, result=task.result)
            limit = self.reach.settings.max_frame_bytes
            if len(text) <= limit // 4 or len(text.encode()) <= limit:
                self.out.post(text)
                return
            # Sending it would close this caller's connection (1009) with everything on it.
            self.out.post(p.encode("error", task_id=task.task_id, attempt=0, id=req_id,
                                   trace_id=trace_id, error=ProtocolError(
                                       f"the result is {len(text.encode())} bytes with its "
                                       f"frame, over the {limit}-byte limit; it is stored: "
                                       f"read it with status()").to_wire()))
        else:
            error = task.error or {"code": "task_failed", "message": "task failed"}
            self.out.post(p.encode("error", task_id=task.task_id, attempt=0, id=req_id,
                                   trace_id=trace_id, error=error))

    async def _status(self, f: p.Status) -> None:
        task = await self._readable(f.task_id, f.id)
        if task is not None:
            self.out.post(p.encode("task", id=f.id, task=task.view()))

    async def _await(self, f: p.Result) -> None:
        task = await self._readable(f.task_id, f.id)
        if task is not None:
            self._watch(task.task_id, f.id or 0, task)

    async def _readable(self, task_id: str, req_id: int | None) -> Any:
        """The task, if this caller may see it (its own, or one its agent ran); otherwise
        answered as if there were no such task, so ids of others' work cannot be probed."""
        task = await self.reach.gateway.task(task_id)
        if task is None or not may_read(self.caller, task.envelope.caller,
                                        (a.agent for a in task.attempts)):
            self.out.post(error_frame(InvalidParams(
                f"no task with id {task_id!r} for caller {self.caller!r}",
                task_id=task_id), id=req_id))
            return None
        return task


def too_many_capabilities(count: int, limit: int) -> InvalidParams:
    return InvalidParams(
        f"registration refused: {count} capabilities, over the limit of {limit} per agent "
        f"(max_capabilities); split them over several agents", limit=limit)


def _oversize_register(raw: str | bytes, limit: int) -> InvalidParams | None:
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


def new_agent_id() -> str:
    return "ag-" + uuid.uuid4().hex[:16]
