"""Reach as an A2A agent: the official SDK's JSON-RPC dispatcher at ``/a2a`` on the front door.

Served on the REST door's port through ``front_asgi`` (same gate, edge, tokens; the caller is
the door's), like the MCP door. ``reach.a2a_url`` is the base: the Agent Card at
``<base>/.well-known/agent-card.json`` (built per request for the caller, ``a2a_card``),
JSON-RPC at the base (A2A 1.0; 0.3 method names accepted too).

The SDK's request handler interface is implemented over Reach's gateway and store directly
(``ReachHandler``), not over the SDK's executor, queues and in-memory task store: the A2A
task id is the Reach task id and every answer is read from Reach, so ``GetTask`` answers
after a restart, and calls get Reach's trust rules, timeouts, retries and dead letters.

- ``SendMessage``: a task submitted as ``POST /v1/call`` or ``/v1/intent`` submits one
  (``FrontDoor.admit``, then ``FrontDoor.finished``), from the message (``a2a_tasks.request``);
  the completed or failed task is the answer (``return_immediately``: the task as accepted).
- ``SendStreamingMessage`` / ``SubscribeToTask``: the task, each chunk as an artifact
  update, the result artifact and the terminal status.
- ``GetTask``: the task from memory or the store, if this caller may read it.
- ``CancelTask``: the task ends ``cancelled`` (A2A ``CANCELED``) and its agent is told to
  stop; one that has ended, or another caller's: ``TaskNotCancelableError``.
- ``ListTasks``: the caller's own tasks, newest first, by the store's index on (caller,
  created_at, task_id) — made at the door's startup (``Store.index_callers``), so a
  coordinator without A2A pays nothing per insert — in pages (a (created_at, task_id)
  cursor token), filtered by context id (trace), state and status time when asked; a page
  reads at most ``LIST_SCAN`` of the caller's rows (a rare filter may answer a short page
  with a token to go on).
- Push notification configs: kept and sent by the coordinator's one sender
  (``pushes.Pusher``, its A2A kind ``a2a_push.A2AKind``: retries, dead letters).
- The extended card: not configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from typing import Any, Protocol, runtime_checkable

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length, validate_page_size
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from reach.core.tasks import SubmitRequest, Task
from reach.core.trust import may_read
from reach.errors import ReachError
from reach.gateway import cancelling
from reach.ports import TaskPage
from reach.server import a2a_card, a2a_tasks, outbound
from reach.server.a2a_push import A2AKind, A2APushes, Pusher
from reach.server.front import FrontDoor
from reach.server.front_models import Headers
from reach.server.front_problems import HttpProblem
from reach.server.front_views import callable_specs

PREFIX = "/a2a"
HEADERS = ("Idempotency-Key", "traceparent", "X-Reach-Timeout")  # read as the REST door does
DEFAULT_PAGE = DEFAULT_LIST_TASKS_PAGE_SIZE  # ListTasks' page without page_size (50)
LIST_SCAN = 10_000  # most of the caller's rows one ListTasks page reads (reach.store.listing)
CALLER = "reach_caller"  # the ServerCallContext state key naming the door's caller
Scope = MutableMapping[str, Any]
MAX_BEHIND = 10_000  # chunks a stream's reader may fall behind before the stream is ended
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@runtime_checkable
class CallerTasks(Protocol):
    """What ListTasks reads from the store (``reach.store.store.Store`` has it)."""

    async def index_callers(self) -> None: ...

    async def flush(self) -> None: ...

    async def of_caller(self, caller: str, limit: int, *,
                        before: tuple[float, str] | None = None, trace_id: str | None = None,
                        states: list[str] | None = None, updated_after: float | None = None,
                        scan: int = 10_000) -> TaskPage: ...


class _Inbox:
    """A stream's chunks, ``(seq, chunk)``, then the outcome's future, in order. A reader
    that left (``close``) takes no more; one ``MAX_BEHIND`` chunks behind gets ``None``
    (the stream ends; the task goes on)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False

    def chunk(self, _task_id: str, seq: int, chunk: Any) -> None:
        if not self.closed:
            if self.queue.qsize() >= MAX_BEHIND:
                self.closed = True
                self.queue.put_nowait(None)
            else:
                self.queue.put_nowait((seq, chunk))

    def close(self) -> None:
        self.closed = True


class _Callers(DefaultServerCallContextBuilder):
    """The SDK's context, with the caller the front door named (``scope["reach"]``)."""

    def build(self, request: Request) -> ServerCallContext:
        ctx = super().build(request)
        ctx.state[CALLER] = str(request.scope.get("reach", {}).get("caller", ""))
        return ctx


class A2ADoor:
    """The A2A endpoint of one front door: ``app`` is mounted at ``/a2a``."""

    def __init__(self, front: FrontDoor, pusher: Pusher) -> None:
        self.front = front
        self.services = front.services
        s = front.services.settings
        # The coordinator's sender (it owns and closes it); this door adds its kind.
        self.pusher = pusher
        pusher.kinds[A2AKind.name] = A2AKind(outbound.Allow.of(s.notify_allow,
                                                               s.a2a_push_private))
        self.handler = ReachHandler(front, A2APushes(pusher))
        self.dispatcher = JsonRpcDispatcher(self.handler, context_builder=_Callers(),
                                            enable_v0_3_compat=True)
        front.mount(PREFIX, self.app)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app: the card (GET), JSON-RPC (POST at the base); its startup makes the
        store's index ListTasks reads by (a coordinator fails to start without it)."""
        if scope["type"] == "lifespan":
            await receive()
            store = self.front.gateway.store
            if isinstance(store, CallerTasks):
                try:
                    await store.index_callers()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": (
                        f"cannot make the store's index for A2A ListTasks: {exc}")})
                    return
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = Request(scope, receive)
        path = str(scope["path"])[len(str(scope.get("root_path", ""))):].rstrip("/")
        response: Response
        if path == AGENT_CARD_WELL_KNOWN_PATH and request.method == "GET":
            response = JSONResponse(agent_card_to_dict(self.card(request)))
        elif path == "" and request.method == "POST":
            response = await self.dispatcher.handle_requests(request)
        elif path in ("", AGENT_CARD_WELL_KNOWN_PATH):
            response = JSONResponse({"code": "protocol_error", "message": "method not allowed: "
                                     "GET the card, POST JSON-RPC"}, 405)
        else:
            response = JSONResponse({"code": "protocol_error", "message": "no such A2A path: "
                                     f"the card is at {PREFIX}{AGENT_CARD_WELL_KNOWN_PATH}"},
                                    404)
        await response(scope, receive, send)

    def card(self, request: Request) -> pb.AgentCard:
        """This caller's card: the A2A base URL as the caller reached it (the Host header
        passed the door's allowed-hosts check)."""
        host = request.headers.get("host", "")
        base = f"{request.url.scheme}://{host}{request.scope.get('root_path', PREFIX)}"
        s = self.services
        caller = str(request.scope.get("reach", {}).get("caller", ""))
        return a2a_card.card(callable_specs(caller, s.registry, s.trust), base,
                             tokens=not s.trust.open)


class ReachHandler(RequestHandler):
    """The SDK's request handler over Reach's gateway and store."""

    def __init__(self, front: FrontDoor, pusher: A2APushes) -> None:
        self.front = front
        self.pusher = pusher
        self.gateway = front.gateway
        self.registry = front.services.registry

    # ------------------------------------------------------------ sending

    def _request(self, params: pb.SendMessageRequest, ctx: ServerCallContext) -> SubmitRequest:
        message = params.message
        if message.task_id:
            raise UnsupportedOperationError(
                "a Reach task takes one message and ends; send a new message (no task_id) "
                "for more work")
        raw = ctx.state.get("headers", {})  # lower-cased; the door has checked them
        headers = Headers.model_validate({name: raw[name.lower()] for name in HEADERS
                                          if name.lower() in raw})
        capability, _, _ = a2a_tasks.ask(message)
        declared = self.registry.index.get(capability) if capability else None
        records = list(declared.values()) if declared else []
        schema = records[0].capabilities[capability].spec.params if records else None
        return a2a_tasks.request(message, ctx.state.get(CALLER, ""), schema, headers)

    async def _admit(self, req: SubmitRequest, params: pb.SendMessageRequest,
                     sink: Callable[[str, int, Any], None] | None = None) -> Task:
        """Submit the task; a push notification config in the request is checked first
        and kept for the task once it is accepted."""
        config = params.configuration
        push = config.task_push_notification_config if config.HasField(
            "task_push_notification_config") else None
        if push is not None:
            await self.pusher.check(push.url)
        try:
            task, _ = await self.front.admit(req, sink)
        except ReachError as exc:
            raise a2a_tasks.fault(exc.to_wire()) from None
        if push is not None:
            await self.pusher.add(push, task)
        return task

    async def on_message_send(self, params: pb.SendMessageRequest,
                              context: ServerCallContext) -> pb.Task | pb.Message:
        req = self._request(params, context)
        task = await self._admit(req, params)
        if not params.configuration.return_immediately:
            try:
                task = await self.front.finished(task, req.timeout)
            except HttpProblem:  # no outcome within the timeout: the task as it stands now
                task = self.gateway.find(task.task_id) or task
            except ReachError as exc:  # the coordinator stopped: the task resumes on restart
                raise a2a_tasks.fault(exc.to_wire(), task.task_id) from None
        return a2a_tasks.a2a_task(task)

    async def on_message_send_stream(self, params: pb.SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        req = self._request(params, context)
        inbox = _Inbox()
        task = await self._admit(req, params, inbox.chunk)
        async for event in self._follow(task, inbox):
            yield event

    async def on_subscribe_to_task(self, params: pb.SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        task = await self._readable(params.id, context)
        inbox = _Inbox()
        # Chunks come only where the task runs; a sink kept for a task another node of a
        # cluster drives would never be let go (its end settles it there, not here).
        if task.task_id in self.gateway.live:
            self.gateway.add_chunk_sink(task.task_id, inbox.chunk)
        async for event in self._follow(task, inbox):
            yield event

    async def _follow(self, task: Task, inbox: _Inbox) -> AsyncGenerator[Event]:
        """The task, its chunks as they come, then its result and terminal status. The
        outcome is queued behind the chunks sent before it; a coordinator that stops first
        ends the stream with an error naming the task (it resumes on restart)."""
        yield a2a_tasks.a2a_task(task)
        outcome = None if task.terminal else self.gateway.outcome(task.task_id)
        done = task
        if outcome is not None:
            outcome.add_done_callback(inbox.queue.put_nowait)
            try:
                while isinstance(item := await inbox.queue.get(), tuple):
                    yield a2a_tasks.chunk_update(task, *item)
            finally:
                inbox.close()
                outcome.remove_done_callback(inbox.queue.put_nowait)
            if item is None:
                raise a2a_tasks.fault({"code": "rejected", "message": f"the stream fell "
                                       f"{MAX_BEHIND} chunks behind and was ended; the task "
                                       f"goes on: GetTask {task.task_id}"}, task.task_id)
            if item.cancelled() or item.exception() is not None:
                error = item.exception() if not item.cancelled() else None
                wire = error.to_wire() if isinstance(error, ReachError) else {
                    "code": "unavailable", "message": "the task's outcome was lost; GetTask"}
                raise a2a_tasks.fault(wire, task.task_id)
            done = item.result()
        elif not task.terminal:  # pragma: no cover — every unfinished task is live (else a bug)
            done = self.gateway.find(task.task_id) or task
        for event in a2a_tasks.final_events(done):
            yield event

    # ------------------------------------------------------------ tasks

    async def _readable(self, task_id: str, context: ServerCallContext) -> Task:
        """The task, if this caller may see it; otherwise not found (ids of others' work
        cannot be probed, as on the REST door)."""
        caller = context.state.get(CALLER, "")
        task = await self.gateway.task(task_id) if task_id else None
        if task is None or not may_read(caller, task.envelope.caller,
                                        (a.agent for a in task.attempts)):
            raise TaskNotFoundError(f"no task with id {task_id!r} for caller {caller!r}")
        return task

    async def on_get_task(self, params: pb.GetTaskRequest,
                          context: ServerCallContext) -> pb.Task | None:
        task = await self._readable(params.id, context)
        history = not (params.HasField("history_length") and params.history_length == 0)
        return a2a_tasks.a2a_task(task, history=history)

    async def on_cancel_task(self, params: pb.CancelTaskRequest,
                             context: ServerCallContext) -> pb.Task | None:
        task = await self._readable(params.id, context)
        if task.terminal:
            raise TaskNotCancelableError(f"task {task.task_id} has ended ({task.state.value})")
        caller = context.state.get(CALLER, "")
        try:
            done = cancelling.cancel_known(self.gateway, task, caller, "A2A CancelTask",
                                           owner=caller)
        except ReachError as exc:  # another caller's, or run by another node
            raise TaskNotCancelableError(exc.message) from None
        return a2a_tasks.a2a_task(done, history=True)

    async def on_list_tasks(self, params: pb.ListTasksRequest,
                            context: ServerCallContext) -> pb.ListTasksResponse:
        """The caller's own tasks, newest first, a page at a time (``reach.store.listing``):
        ``context_id``, ``status`` and ``status_timestamp_after`` filter, ``page_size`` (1 to
        100; 50 when absent) and ``page_token`` page, ``history_length`` and
        ``include_artifacts`` shape each task, as the SDK's own handler does."""
        store = self.gateway.store
        if not isinstance(store, CallerTasks):
            raise UnsupportedOperationError("this coordinator's store cannot list tasks")
        validate_history_length(params)
        if params.HasField("page_size"):
            validate_page_size(params.page_size)
        size = params.page_size or DEFAULT_PAGE
        states = a2a_tasks.reach_states(params.status) if params.status else None
        if states == []:
            return pb.ListTasksResponse(page_size=size)
        after = (params.status_timestamp_after.ToNanoseconds() / 1e9
                 if params.HasField("status_timestamp_after") else None)
        await store.flush()  # the filters read the rows: with the changes written behind
        page = await store.of_caller(
            context.state.get(CALLER, ""), size, before=a2a_tasks.cursor(params.page_token),
            trace_id=params.context_id or None, states=states, updated_after=after,
            scan=LIST_SCAN)
        out = pb.ListTasksResponse(page_size=size, total_size=page.total)
        for task in page.tasks:  # the newest state is memory's when it holds the task
            shown = a2a_tasks.a2a_task(self.gateway.find(task.task_id) or task)
            if not params.include_artifacts:
                shown.ClearField("artifacts")
            out.tasks.append(apply_history_length(shown, params))
        if page.next is not None:
            out.next_page_token = a2a_tasks.page_token(*page.next)
        return out

    # ------------------------------------------------------------ push notifications

    async def on_create_task_push_notification_config(
            self, params: pb.TaskPushNotificationConfig,
            context: ServerCallContext) -> pb.TaskPushNotificationConfig:
        return await self.pusher.add(params, await self._readable(params.task_id, context))

    async def on_get_task_push_notification_config(
            self, params: pb.GetTaskPushNotificationConfigRequest,
            context: ServerCallContext) -> pb.TaskPushNotificationConfig:
        task = await self._readable(params.task_id, context)
        return await self.pusher.get(task.task_id, params.id)

    async def on_list_task_push_notification_configs(
            self, params: pb.ListTaskPushNotificationConfigsRequest,
            context: ServerCallContext) -> pb.ListTaskPushNotificationConfigsResponse:
        task = await self._readable(params.task_id, context)
        return pb.ListTaskPushNotificationConfigsResponse(
            configs=await self.pusher.of(task.task_id))

    async def on_delete_task_push_notification_config(
            self, params: pb.DeleteTaskPushNotificationConfigRequest,
            context: ServerCallContext) -> None:
        task = await self._readable(params.task_id, context)
        await self.pusher.delete(task.task_id, params.id)

    # ------------------------------------------------------------ not served

    async def on_get_extended_agent_card(self, params: pb.GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> pb.AgentCard:
        raise ExtendedAgentCardNotConfiguredError()
