"""A caller's websocket session: submits, status queries and pushed outcomes.

A submit goes to the gateway as one ``SubmitRequest``; its ``accepted`` is posted from the
commit's completion callback (the common path creates no task), and its outcome from the
gateway's watcher. The session paces its own reading (``_backlog``) so that one caller's
burst waits on its own socket, not in front of every other peer on the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.server import ServerConnection

from reach.core.tasks import SubmitRequest, TaskState
from reach.core.trust import may_read
from reach.errors import InvalidParams, ProtocolError, ReachError, Unavailable
from reach.gateway import cancelling
from reach.ports import DuplicateKey, Timer
from reach.server.services import Services
from reach.server.session import LoopLag, Session, error_frame, refuse, wire_error
from reach.wire import protocol as p

log = logging.getLogger("reach.channel")
MAX_SESSION_WORK = 8  # status/result answers one caller session prepares at a time
LAG_LIMIT = 0.002  # loop lag (s) past which heavy callers' sessions pause their reading
HEAVY_CALLER = 16  # unfinished tasks that make a caller heavy
MAX_UNACKED = 1024  # submits one caller session has read and not yet seen committed
SHARED_UNACKED = 32  # the same while other callers have work in flight
DEFER_ACK = 0.05  # how long a `defer_ack` submit's acknowledgement may wait for its outcome
CALLER_SENDS = ("submit", "status", "result", "cancel")
_Welcome = p.unchecked(p.Welcome)
_Accepted = p.unchecked(p.Accepted)
_Chunk = p.unchecked(p.Chunk)
_Result = p.unchecked(p.Result)
_Error = p.unchecked(p.Error)
_TaskInfo = p.unchecked(p.TaskInfo)


@dataclass(slots=True)
class _Deferred:
    req_id: int
    task_id: str
    trace_id: str
    acked: bool = False
    answered: bool = False


class CallerSession(Session):
    """One connected caller: submits, status queries and pushed outcomes."""

    def __init__(self, services: Services, ws: ServerConnection, loop_lag: LoopLag) -> None:
        super().__init__(services, ws)
        self._loop_lag = loop_lag
        self.caller = "anonymous"
        self._work: set[asyncio.Task[None]] = set()
        self._unacked = 0  # submits whose commit is pending
        self._limit = MAX_UNACKED  # the window ``_backlog`` last applied
        self._window: asyncio.Future[None] | None = None
        self._deferred: deque[tuple[float, _Deferred]] = deque()
        self._ack_timer: Timer | None = None
        self._token: str | None = None

    async def run(self, hello: p.Hello) -> None:
        try:
            self.services.trust.authenticate(hello.token, hello.caller, "caller")
        except ReachError as exc:
            await refuse(self.ws, exc)
            await self.out.aclose()
            return
        self.caller = hello.caller
        # The token it proved itself with: what its webhooks are signed with (reach.server.notify).
        self._token = None if self.services.trust.open else hello.token
        s = self.services.settings
        self.out.post(p.dump(_Welcome(role="caller", heartbeat_interval=s.heartbeat_interval,
                                      max_frame_bytes=s.max_frame_bytes)))
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
        if self.out.closed:
            # Closed (a slow reader past max_outbox_bytes, or gone): no answer could be sent,
            # so the work is not done. A submit left unanswered was not acknowledged; the
            # caller submits it again when it reconnects.
            return
        if frame.type == "submit":
            self._on_submit(frame)
        elif frame.type == "status":
            self._spawn(self._status(frame))
        elif frame.type == "result":
            self._spawn(self._await(frame))
        elif frame.type == "cancel":
            self._spawn(self._cancel(frame))
        else:
            raise ProtocolError(f"frame type {frame.type!r} is not accepted from a caller; a "
                                f"caller sends {', '.join(CALLER_SENDS)}", type=frame.type,
                                expected=list(CALLER_SENDS))

    def _held(self) -> bool:
        return (len(self._work) >= MAX_SESSION_WORK or self._unacked >= SHARED_UNACKED
                or self._loop_lag.lag > LAG_LIMIT)

    def _waits(self) -> bool:
        # Each status/result answer may serialize up to a frame's worth of task: a peer asking
        # thousands at once would fill the loop's ready queue ahead of everyone else.
        if len(self._work) >= MAX_SESSION_WORK:
            return True
        # Submits read but not yet committed: past the window, read no more until half are.
        # A caller sending faster than the store commits would otherwise fill the loop with
        # its tasks, and every other peer's step would wait behind them. The window is
        # narrow only while other callers submit work too: alone, a caller competes with
        # nobody and pipelines as deep as it likes (bench/relay.py at 64 in flight).
        contended = self.services.gateway.contended(self.caller)
        self._limit = SHARED_UNACKED if contended else MAX_UNACKED
        return self._unacked >= self._limit or (contended and self._heavy())

    def _heavy(self) -> bool:
        # The loop is behind, and this caller is one of those keeping it busy: read its next
        # frames a little later (while other callers submit). A caller with a few calls in
        # flight is never slowed.
        return self._loop_lag.lag > LAG_LIMIT and \
            self.services.gateway.caller_live.get(self.caller, 0) > HEAVY_CALLER

    async def _backlog(self) -> None:
        while len(self._work) >= MAX_SESSION_WORK:
            await asyncio.wait(set(self._work), return_when=asyncio.FIRST_COMPLETED)
        contended = self.services.gateway.contended(self.caller)
        self._limit = SHARED_UNACKED if contended else MAX_UNACKED
        if self._unacked >= self._limit:
            self._window = asyncio.get_running_loop().create_future()
            await self._window
        while contended and self._heavy():
            await asyncio.sleep(min(0.05, self._loop_lag.lag))

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
        # completion callback. Only a duplicate known solely to the store needs a coroutine,
        # and a request by intent when the model extra routes it (off the loop).
        request = SubmitRequest(
            f.capability, f.params, self.caller, f.idempotency_key, f.priority, f.timeout,
            f.max_retries, f.trace_id, f.parent_task_id, f.traceparent, f.intent, f.hedge,
            f.tags, f.fallback, queue_wait=f.queue_wait, call=f.defer_ack, notify=f.notify,
            then=f.then)
        if f.notify is not None:  # its URL is checked before it is accepted (a look-up)
            self._spawn(self._notified(f, request))
            return
        routing = self.services.intent_routing
        if routing is not None and f.intent and not f.capability:
            self._spawn(self._route(f, request, routing))
        else:
            self._admit(f, request)

    async def _notified(self, f: p.Submit, request: SubmitRequest) -> None:
        try:
            await self.services.notify.check(f.notify)
        except ReachError as exc:
            self.out.post(error_frame(detailed(exc, f.capability), id=f.id))
            return
        routing = self.services.intent_routing
        if routing is not None and f.intent and not f.capability:
            await self._route(f, request, routing)
        else:
            self._admit(f, request)

    async def _keep(self, f: p.Submit, task: Any, duplicate: bool) -> None:
        """Keep the task's webhook in the store, then acknowledge the submit."""
        try:
            await self.services.notify.keep(task, duplicate, self._token)
        except ReachError as exc:  # (the store failed: unavailable, not acknowledged)
            self.out.post(error_frame(detailed(exc, f.capability), id=f.id))
            return
        self._acknowledge(f, task, duplicate, kept=True)

    async def _route(self, f: p.Submit, request: SubmitRequest, routing: Any) -> None:
        gateway = self.services.gateway
        try:
            request = await routing.route(request, gateway.router.may_call(
                self.caller, gateway.registry.declaring))
        except ReachError as exc:
            self.out.post(error_frame(detailed(exc, f.capability), id=f.id))
            return
        self._admit(f, request)

    def _admit(self, f: p.Submit, request: SubmitRequest) -> None:
        sink = self._chunk_sink(f.id) if f.wait else None
        try:
            admission = self.services.gateway.accept(request, sink)
        except ReachError as exc:
            self.out.post(error_frame(detailed(exc, f.capability), id=f.id))
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
            self.services.gateway.then(task.task_id, commit, committed)

    async def _late_duplicate(self, f: p.Submit, task_id: str) -> None:
        try:
            task = await self.services.gateway.first_of(task_id, f.capability or "",
                                                        f.idempotency_key)
        except ReachError as exc:
            self.out.post(error_frame(detailed(exc, f.capability or ""), id=f.id))
            return
        self._acknowledge(f, task, True)

    def _acknowledge(self, f: p.Submit, task: Any, duplicate: bool,
                     commit: asyncio.Future[None] | None = None, kept: bool = False) -> None:
        dup = None if commit is None or commit.cancelled() else commit.exception()
        if isinstance(dup, DuplicateKey):  # another coordinator accepted the key first
            self._spawn(self._late_duplicate(f, dup.first_task_id))
            return
        if commit is not None and (commit.cancelled() or commit.exception() is not None):
            # The store failed: the task was not accepted, so it is not acknowledged.
            why = "cancelled" if commit.cancelled() else repr(commit.exception())
            log.error("submit not committed: %s", why)
            # (unavailable, as the REST door says it: nothing was acknowledged, so the caller
            # retries with the same key, on this coordinator or another)
            self.out.post(error_frame(Unavailable(f"task not accepted (the store failed: "
                                                  f"{why}); retry"), id=f.id))
            return
        if f.notify is not None and not kept:  # its webhook is kept before the ack
            self._spawn(self._keep(f, task, duplicate))
            return
        if f.wait and task.terminal and not duplicate:
            # Done before its commit was: one frame both acknowledges and answers.
            self._post_outcome(task, f.id, accepts=True)
            return
        if f.wait and f.defer_ack and not duplicate:
            self._defer_ack(f, task)
            return
        self.out.post(p.dump(_Accepted(id=f.id, task_id=task.task_id,
                                       trace_id=task.envelope.trace_id, duplicate=duplicate)))
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

        watching = self.services.gateway.watch(task.task_id, outcome)
        if not watching:  # pragma: no cover — a stored, unfinished task is always live
            self._post_outcome(task, f.id, accepts=True)
            return
        clock = self.services.clock
        self._deferred.append((clock.now() + DEFER_ACK, pending))
        if self._ack_timer is None:
            self._ack_timer = clock.call_at(self._deferred[0][0], self._ack_due)

    def _ack_due(self) -> None:
        clock = self.services.clock
        now = clock.now()
        self._ack_timer = None
        deferred = self._deferred
        while deferred and (deferred[0][0] <= now or deferred[0][1].answered):
            # (answered ones need no timer: dropped here, not each woken for at its time)
            _, pending = deferred.popleft()
            if not pending.answered:
                pending.acked = True
                self.out.post(p.dump(_Accepted(id=pending.req_id, task_id=pending.task_id,
                                               trace_id=pending.trace_id, duplicate=False)))
        if deferred:
            self._ack_timer = clock.call_at(deferred[0][0], self._ack_due)

    def _chunk_sink(self, req_id: int) -> Callable[[str, int, Any], None]:
        def sink(task_id: str, seq: int, data: Any) -> None:
            self.out.post(p.dump(_Chunk(task_id=task_id, attempt=0, id=req_id, seq=seq,
                                        data=data)))
        return sink

    def _watch(self, task_id: str, req_id: int, task: Any, accepts: bool = False) -> None:
        if not self.services.gateway.watch(
                task_id, lambda done: self._post_outcome(done, req_id, accepts)):
            if task is not None and task.terminal:
                self._post_outcome(task, req_id, accepts)
            else:  # pragma: no cover — every unfinished task is live; a bug, so said loudly
                log.error("task %s is neither live nor finished", task_id)
                self.out.post(error_frame(Unavailable(
                    f"task {task_id} is not being driven; ask again shortly"), id=req_id,
                    task_id=task_id))

    def _post_outcome(self, task: Any, req_id: int, accepts: bool = False) -> None:
        if task.envelope.then and task.state is TaskState.SUCCEEDED:
            self._follow_chain(task, req_id, accepts)
            return
        trace_id = task.envelope.trace_id if accepts else None
        if task.state is TaskState.SUCCEEDED:
            text = p.dump(_Result(task_id=task.task_id, attempt=0, id=req_id,
                                  trace_id=trace_id, result=task.result,
                                  fallback=task.fallback))
            limit = self.services.settings.max_frame_bytes
            size = p.oversize(text, limit)
            if size is None:
                self.out.post(text)
                return
            # Sending it would close this caller's connection (1009) with everything on it.
            error = ProtocolError(f"the result is {size} bytes with its frame, over the "
                                  f"{limit}-byte limit; it is stored: read it with "
                                  f"status()").to_wire()
        else:
            error = task.error or {"code": "task_failed", "message": "task failed"}
        self.out.post(p.dump(_Error(task_id=task.task_id, attempt=0, id=req_id,
                                    trace_id=trace_id, error=wire_error(error))))

    def _follow_chain(self, task: Any, req_id: int, accepts: bool) -> None:
        """A chain task passed its result on: its caller's outcome is its chain's, so the
        answer waits for the next step (and so on to the last, or the step that failed;
        docs/protocol.md §chains). An outcome that would also acknowledge the submit
        acknowledges it now, naming this task, as a plain ``accepted``."""
        if accepts:
            self.out.post(p.dump(_Accepted(id=req_id, task_id=task.task_id,
                                           trace_id=task.envelope.trace_id, duplicate=False)))
        self.services.gateway.chains.follow(
            task, lambda done: self._post_outcome(done, req_id) if not self.out.closed
            else None)

    async def _status(self, f: p.Status) -> None:
        task = await self._readable(f.task_id, f.id)
        if task is not None and not self.out.closed:  # (a task view can be megabytes)
            self.out.post(p.dump(_TaskInfo(id=f.id, task=task.view())))

    async def _cancel(self, f: p.Cancel) -> None:
        """Cancel one of this caller's own tasks; answered with its view (ended, whether by
        this cancel or before it). Another caller's task is answered as no task at all."""
        task = await self._readable(f.task_id, f.id)
        if task is None:
            return
        try:
            task = cancelling.cancel_known(self.services.gateway, task, self.caller,
                                           owner=self.caller)
        except ReachError as exc:
            self.out.post(error_frame(exc, id=f.id))
            return
        if f.id is not None and not self.out.closed:
            self.out.post(p.dump(_TaskInfo(id=f.id, task=task.view())))

    async def _await(self, f: p.Result) -> None:
        task = await self._readable(f.task_id, f.id)
        if task is not None:
            self._watch(task.task_id, f.id or 0, task)

    async def _readable(self, task_id: str, req_id: int | None) -> Any:
        """The task, if this caller may see it (its own, or one its agent ran); otherwise
        answered as if there were no such task, so ids of others' work cannot be probed."""
        task = await self.services.gateway.task(task_id)
        if task is None or not may_read(self.caller, task.envelope.caller,
                                        (a.agent for a in task.attempts)):
            self.out.post(error_frame(InvalidParams(
                f"no task with id {task_id!r} for caller {self.caller!r}",
                task_id=task_id, reason="no such task"), id=req_id))
            return None
        return task


def detailed(err: ReachError, capability: str) -> ReachError:
    """An ``invalid_params`` refusal with the details docs/protocol.md §6 promises: ``reason``
    (what is wrong, always) and ``capability`` (as the caller named it, when it did)."""
    if err.code == "invalid_params":
        err.details.setdefault("reason", err.message)
        if capability:
            err.details.setdefault("capability", capability)
    return err
