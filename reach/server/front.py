"""The REST front door: callers that do not speak Reach's websocket protocol call over HTTP.

An aiohttp server on a second port of the coordinator (``Settings.http_port``; the websockets
library reads no request bodies, see docs/http-api.md "Why a second port"). Every route drives
the gateway the way a websocket caller session does (reach/server/caller_session.py):
``Gateway.accept(SubmitRequest, sink)`` checks and records the task, its ``commit`` completes
once the task is stored (a submit is acknowledged only then), and the outcome is the task
book's future (``Gateway.outcome``). Trust is the websocket's (core/trust.py, through
``front_problems.identify``); errors are problem+json (``front_problems``); bodies are the
models of ``front_models``, from which ``front_openapi`` builds ``/openapi.json``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from reach.core.tasks import SubmitRequest, Task, TaskState
from reach.core.trust import may_read
from reach.errors import (
    InvalidParams,
    ProtocolError,
    ReachError,
    ReachTimeout,
    Unavailable,
)
from reach.gateway import cancelling
from reach.gateway.clock import within
from reach.ports import DuplicateKey
from reach.server import front_sse
from reach.server.front_asgi import ASGIApp, mount_asgi
from reach.server.front_edge import Edge
from reach.server.front_models import (
    CallQuery,
    CallResult,
    Headers,
    IntentBody,
    SubmitBody,
    TaskAccepted,
    WaitQuery,
)
from reach.server.front_openapi import document
from reach.server.front_problems import HttpProblem, bearer_token, identify, loads, problem
from reach.server.front_views import capabilities, health
from reach.server.services import Services

log = logging.getLogger("reach.front")
JSON = "application/json"
GRACE = 1.0  # seconds past a call's own timeout the front door waits for the gateway's answer


def _json(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.Response(status=status, body=model.__pydantic_serializer__.to_json(model),
                        content_type=JSON, headers=headers)


def _checked(model: type[BaseModel], data: Any, what: str) -> Any:
    """``data`` validated as ``model``, or ``invalid_params`` naming every field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}"
                          for e in exc.errors()[:10])
        raise InvalidParams(f"{what} refused: {wrong}") from None


class FrontDoor:
    """The HTTP server: ``start(host, port)``, ``stop()``, ``port``, and its aiohttp ``app``."""

    def __init__(self, services: Services) -> None:
        s = services.settings
        self.services = services
        self.gateway = services.gateway
        self.chunks = front_sse.Chunks(s.max_frame_bytes, s.max_outbox_bytes)
        self.spec = document()
        self._spec_bytes = to_json(self.spec)
        self.edge = Edge(s)  # bodies refused unread, each caller's share, problem+json
        self.gate = self.edge.gate  # connections: first-head timeout, per-address, total caps
        self.app = web.Application(client_max_size=s.max_frame_bytes,
                                   middlewares=[self.edge.middleware])
        self.app.router.add_post("/v1/call/{capability}", self.call)
        self.app.router.add_post("/v1/intent", self.intent)
        self.app.router.add_post("/v1/tasks", self.submit)
        self.app.router.add_get("/v1/tasks/{task_id}", self.status)
        self.app.router.add_delete("/v1/tasks/{task_id}", self.cancel)
        self.app.router.add_get("/v1/tasks/{task_id}/stream", self.stream)
        self.app.router.add_get("/v1/capabilities", self.capabilities)
        self.app.router.add_get("/openapi.json", self.openapi)
        self.app.router.add_get("/healthz", self.healthz)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    def mount(self, prefix: str, asgi_app: ASGIApp) -> None:
        """Serve an ASGI app (the MCP or A2A SDK's) at ``prefix`` on this door, before
        ``start``: same port, gate, edge, tokens and body limits as REST; its lifespan runs
        in ``start``/``stop`` (front_asgi)."""
        s = self.services.settings
        allowed = s.http_allowed_hosts
        if allowed is None:
            allowed = ("127.0.0.1:*", "localhost:*", "[::1]:*", f"{s.host}:*")
        mount_asgi(self.app, prefix, asgi_app, authorize=lambda r: self._who(r)[0],
                   allowed_hosts=allowed, body_timeout=s.http_body_timeout)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); returns the port bound."""
        s = self.services.settings
        # auto_decompress=False: aiohttp's parser would otherwise inflate a gzip or deflate
        # body as it arrives, before any route could refuse it (bodies with a
        # Content-Encoding are refused 415 at the edge instead). lingering_time=0: a body
        # left unread once the answer is decided is not drained; the connection is closed.
        # keepalive_timeout: how long a connection may idle between requests (also with
        # half a head sent); the first head's timeout is the gate's. handler_cancellation: a
        # request whose connection is gone ends with it (a long poll or a stream would
        # otherwise hold its caller's share with nobody to answer; a submit's commit is
        # shielded, so an accepted task is stored all the same).
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               shutdown_timeout=1.0, auto_decompress=False,
                               lingering_time=0, keepalive_timeout=s.http_idle_timeout,
                               handler_cancellation=True)
        await runner.setup()
        assert runner.server is not None
        try:  # aiohttp's protocol behind the gate (what web.TCPSite would bind, guarded)
            server = await asyncio.get_running_loop().create_server(
                self.gate.protocol(runner.server), host, port, backlog=128)
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._server = runner, server
        self.port = int(server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # no new connections; those open are shut down next
            self._server = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # ------------------------------------------------------------ the edge

    @property
    def inflight(self) -> int:
        """Requests being answered."""
        return self.edge.inflight

    def _who(self, request: web.Request) -> tuple[str, Headers]:
        h = request.headers
        raw = {name: h[name] for name in ("X-Reach-Caller", "Idempotency-Key", "traceparent",
                                          "X-Reach-Timeout") if name in h}
        headers: Headers = _checked(Headers, raw, "headers")
        caller = identify(self.services.trust, h.get("Authorization"), headers)
        self.edge.identified(request, caller)
        return caller, headers

    async def _body(self, request: web.Request) -> Any:
        """The body as JSON, read within ``http_body_timeout`` (a trickled body is 408 and
        its connection closed)."""
        limit = self.services.settings.http_body_timeout
        try:
            async with asyncio.timeout(limit):
                raw = await request.read()
        except TimeoutError:
            raise HttpProblem(ProtocolError(
                f"the request body did not arrive within {limit:g} s (http_body_timeout)"),
                408) from None
        return loads(raw)

    # ------------------------------------------------------------ driving the gateway

    async def admit(self, request: SubmitRequest,
                     sink: Callable[[str, int, Any], None] | None = None
                     ) -> tuple[Task, bool]:
        """Accept a task and return once it is stored: (task, duplicate). As the caller
        session does: a duplicate known only to the store is read back and checked to be
        the same work; a failed commit means the task was not accepted."""
        gateway = self.gateway
        routing = self.services.intent_routing
        if routing is not None and request.intent and not request.capability:
            request = await routing.route(request, gateway.router.may_call(
                request.caller, gateway.registry.declaring))
        admission = gateway.accept(request, sink)
        task = admission.task or await gateway.first_of(
            admission.lookup or "", request.capability, request.idempotency_key)
        if admission.commit is not None:
            try:
                await asyncio.shield(admission.commit)
            except DuplicateKey as dup:  # another coordinator accepted the key first
                return await gateway.first_of(dup.first_task_id, request.capability,
                                              request.idempotency_key), True
            except Exception as exc:
                log.error("submit not committed: %r", exc)
                raise Unavailable(f"task not accepted (the store failed: {exc!r}); "
                                  f"retry") from None
        return task, admission.duplicate

    async def finished(self, task: Task, timeout: float | None) -> Task:
        """The task once it is terminal; ``timeout`` (plus a grace for the gateway's own
        answer) bounds the wait, then 504 with the task id to ask about later."""
        if task.terminal:
            return task
        outcome = self.gateway.outcome(task.task_id)
        if outcome is None:  # pragma: no cover — every unfinished task is live (else a bug)
            raise Unavailable(f"task {task.task_id} is not being driven; ask again shortly",
                              task_id=task.task_id)
        if timeout is None:
            return await asyncio.shield(outcome)
        if not await within(self.services.clock, outcome, timeout + GRACE):
            raise HttpProblem(ReachTimeout(
                f"no outcome within {timeout}s; the task goes on: GET /v1/tasks/"
                f"{task.task_id} tells how it ends", task_id=task.task_id), 504)
        return outcome.result()

    def _trace(self, task: Task) -> dict[str, str]:
        env = task.envelope
        out = {"X-Reach-Task-Id": env.task_id, "X-Reach-Trace-Id": env.trace_id}
        if env.traceparent:
            out["traceparent"] = env.traceparent
        return out

    def _answer(self, task: Task) -> web.Response:
        env, headers = task.envelope, self._trace(task)
        if task.state is TaskState.SUCCEEDED:
            return _json(CallResult(task_id=env.task_id, trace_id=env.trace_id,
                                    capability=env.capability, result=task.result,
                                    fallback=task.fallback),
                         headers=headers)
        return problem(task.error or {"code": "task_failed", "message": "task failed"},
                       task_id=env.task_id, trace_id=env.trace_id, headers=headers)

    async def _readable(self, caller: str, task_id: str) -> Task:
        """The task, if this caller may see it; otherwise the answer an unknown id gets
        (caller_session._readable: ids of others' work cannot be probed)."""
        task = await self.gateway.task(task_id)
        if task is None or not may_read(caller, task.envelope.caller,
                                        (a.agent for a in task.attempts)):
            raise HttpProblem(InvalidParams(
                f"no task with id {task_id!r} for caller {caller!r}", task_id=task_id), 404)
        return task

    # ------------------------------------------------------------ routes

    async def call(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/call/{capability}``: the body is the params; answers the result."""
        caller, h = self._who(request)
        query: CallQuery = _checked(CallQuery, dict(request.query), "query")
        params = await self._body(request)
        if not isinstance(params, dict):
            raise InvalidParams("the body must be a JSON object: the capability's params")
        timeout = query.timeout if query.timeout is not None else h.timeout
        req = SubmitRequest(request.match_info["capability"], params, caller,
                            h.idempotency_key, query.priority, timeout,
                            traceparent=h.traceparent, queue_wait=query.queue_wait, call=True)
        return await self._run(request, req, timeout)

    async def intent(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/intent``: ``{"intent", "params"}``, routed to the capability it names."""
        caller, h = self._who(request)
        body: IntentBody = _checked(IntentBody, await self._body(request), "body")
        timeout = body.timeout if body.timeout is not None else h.timeout
        req = SubmitRequest(body.choose or "", body.params, caller, h.idempotency_key, 5,
                            timeout, traceparent=h.traceparent, intent=body.intent,
                            tags=body.tags, call=True)
        return await self._run(request, req, timeout)

    async def _run(self, request: web.Request, req: SubmitRequest, timeout: float | None
                   ) -> web.StreamResponse:
        if "text/event-stream" in request.headers.get("Accept", ""):
            task, _ = await self.admit(req, self.chunks.sink)
            self._forget_when_done(task)
            return await self._stream(request, task)
        task, _ = await self.admit(req)
        return self._answer(await self.finished(task, timeout))

    async def submit(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/tasks``: 202 once the task is stored; ``Idempotency-Key`` honoured."""
        caller, h = self._who(request)
        body: SubmitBody = _checked(SubmitBody, await self._body(request), "body")
        req = SubmitRequest(body.capability or "", body.params, caller, h.idempotency_key,
                            body.priority, body.timeout, body.max_retries,
                            traceparent=h.traceparent, intent=body.intent, hedge=body.hedge,
                            tags=body.tags, fallback=body.fallback,
                            queue_wait=body.queue_wait, notify=body.notify, then=body.then)
        if body.notify is not None:  # checked before it is accepted, kept before the 202
            await self.services.notify.check(body.notify)
        task, duplicate = await self.admit(req, self.chunks.sink)
        if body.notify is not None:
            # (signed with the token it proved itself with, as the websocket door does)
            await self.services.notify.keep(task, duplicate, None if self.services.trust.open
                                            else bearer_token(request.headers.get("Authorization")))
        self._forget_when_done(task)
        env = task.envelope
        status_url = f"/v1/tasks/{env.task_id}"
        return _json(TaskAccepted(task_id=env.task_id, trace_id=env.trace_id,
                                  capability=env.capability, duplicate=duplicate,
                                  status_url=status_url, stream_url=status_url + "/stream"),
                     202, {"Location": status_url, **self._trace(task)})

    def _forget_when_done(self, task: Task) -> None:
        if not self.gateway.watch(task.task_id, lambda t: self.chunks.finished(t.task_id)):
            self.chunks.finished(task.task_id)

    async def status(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/tasks/{task_id}``: the task's status and result (``?wait=`` long-polls)."""
        caller, _ = self._who(request)
        query: WaitQuery = _checked(WaitQuery, dict(request.query), "query")
        task = await self._readable(caller, request.match_info["task_id"])
        outcome = self.gateway.outcome(task.task_id)
        if query.wait and outcome is not None and not task.terminal:
            await within(self.services.clock, outcome, query.wait)
        return self._task(task)

    def _task(self, task: Task) -> web.Response:
        """A task's view, its state also in ``X-Reach-State`` (for shell callers)."""
        return web.Response(body=to_json(task.view()), content_type=JSON,
                            headers={"X-Reach-State": task.state.value, **self._trace(task)})

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /v1/tasks/{task_id}``: cancel one of the caller's tasks; answers its view
        (state ``cancelled``, or as it ended if it ended first)."""
        caller, _ = self._who(request)
        task = await self._readable(caller, request.match_info["task_id"])
        return self._task(cancelling.cancel_known(self.gateway, task, caller, owner=caller))

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/tasks/{task_id}/stream``: the task's chunks as server-sent events."""
        caller, _ = self._who(request)
        task = await self._readable(caller, request.match_info["task_id"])
        return await self._stream(request, task)

    async def _stream(self, request: web.Request, task: Task) -> web.StreamResponse:
        tid = task.task_id
        outcome = self.gateway.outcome(tid)
        if outcome is None:  # finished: what was kept, then the outcome
            outcome = asyncio.get_running_loop().create_future()
            outcome.set_result(task)
        elif not self.chunks.has(tid):
            self.gateway.add_chunk_sink(tid, self.chunks.sink)  # (submitted elsewhere)
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no", **self._trace(task)})
        await response.prepare(request)
        reader = self.chunks.follow(tid)

        def final() -> bytes:
            if outcome.exception() is not None:
                err = outcome.exception()
                wire = err.to_wire() if isinstance(err, ReachError) else {
                    "code": "unavailable", "message": repr(err)}
                return front_sse.event("error", _problem_bytes(wire, task))
            done: Task = outcome.result()
            env = done.envelope
            if done.state is TaskState.SUCCEEDED:
                return front_sse.event("result", to_json({
                    "task_id": env.task_id, "trace_id": env.trace_id, "result": done.result}))
            return front_sse.event("error", _problem_bytes(
                done.error or {"code": "task_failed", "message": "task failed"}, done))

        try:
            await front_sse.pump(response, reader, outcome, final)
        except ConnectionResetError:
            pass  # the reader left; the task goes on, and its status keeps the result
        finally:
            self.chunks.leave(tid, reader)
        return response

    async def capabilities(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/capabilities``: what this caller may call, and who serves it."""
        caller, _ = self._who(request)
        s = self.services
        return _json(capabilities(caller, s.registry, s.trust, s.node_id))

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=self._spec_bytes, content_type=JSON)

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        view = health(self.gateway.accepting, self.services.registry)
        return _json(view, 200 if view.status == "ok" else 503)


def _problem_bytes(error: dict[str, Any], task: Task) -> bytes:
    response = problem(error, task_id=task.task_id, trace_id=task.envelope.trace_id)
    assert isinstance(response.body, bytes)
    return response.body
