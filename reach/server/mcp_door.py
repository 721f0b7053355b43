"""Reach as an MCP server: the official SDK's low-level ``Server`` at ``/mcp`` on the front door.

Served on the REST door's port through ``front_asgi`` (same gate, edge, tokens; the caller is
the door's); the SDK's ``StreamableHTTPSessionManager`` runs in the door's lifespan and
serves both eras: 2025-11-25 sessions (initialize, then a session id) and the stateless
2026-07-28 revision (``subscriptions/listen`` for change events).

- ``tools/list``: every routable capability the caller may call (``mcp_tools.tool``).
- ``tools/call``: a task submitted to the gateway exactly as ``POST /v1/call`` does it
  (``FrontDoor.admit`` then ``FrontDoor.finished``): trust, timeouts, retries, hedging,
  breakers, dead letters, traces all apply. The idempotency key is ``_meta``'s
  ``agent-reach/idempotency-key`` or the ``Idempotency-Key`` header; the timeout (seconds,
  retries included) is ``_meta``'s ``agent-reach/timeout`` or the ``X-Reach-Timeout``
  header. Streaming chunks become progress notifications when the request carries a
  progress token.
- A 2025 session is its opener's: another caller presenting its id is answered 404
  (``with_principal``).
- ``notifications/tools/list_changed``: the registry's tool set is watched (debounced,
  ``DEBOUNCE``); a change goes to the callers who may call what changed: on their 2026
  ``subscriptions/listen`` streams (``mcp_listen``: a bus per caller) and on each of their
  open 2025 sessions that listed tools.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError

from reach._version import __version__
from reach.core.agents import AgentRecord
from reach.core.tasks import SubmitRequest, TaskState
from reach.errors import InvalidParams, ReachError
from reach.server import mcp_tools
from reach.server.front import FrontDoor
from reach.server.front_models import Headers
from reach.server.front_problems import HttpProblem
from reach.server.mcp_listen import CallerListens
from reach.wire.bounds import MAX_TIMEOUT

log = logging.getLogger("reach.mcp")
MAX_SESSIONS = 10_000  # 2025 sessions remembered for list_changed (the SDK's own cap)
DEBOUNCE = 0.05  # seconds a burst of registry changes is gathered into one list_changed
TIMEOUT_META = "agent-reach/timeout"  # the _meta key of a call's timeout (seconds)
Ctx = ServerRequestContext[Any, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ReachServer(Server[Any]):
    """The low-level server with ``tools.listChanged`` announced to 2025 sessions (the SDK's
    HTTP path would otherwise announce it off)."""

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities, extensions)


def with_principal(scope: Scope) -> Scope:
    """``scope`` with the front door's caller as the SDK's authenticated user: the session
    manager binds a 2025 session to the principal that opened it and answers any other
    caller that presents its id as if the session did not exist (404), so a leaked session
    id lets nobody else read its notifications or end it."""
    caller = str(scope.get("reach", {}).get("caller", ""))
    user = AuthenticatedUser(AccessToken(token="", client_id=caller, scopes=[]))
    return {**scope, "user": user}


def caller_of(ctx: Ctx) -> str:
    """The caller the front door named for this request (front_asgi's ``scope["reach"]``)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        return str(scope.get("reach", {}).get("caller", ""))
    return ""


class McpDoor:
    """The MCP endpoint of one front door: ``app`` is mounted at ``/mcp``."""

    def __init__(self, front: FrontDoor) -> None:
        self.front = front
        s = front.services.settings
        self.services = front.services
        self.listens = CallerListens(caller_of)  # 2026 listen streams, per caller
        self.server = ReachServer("agent-reach", version=__version__,
                                   on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                                   on_subscriptions_listen=self.listens)
        allowed = list(s.http_allowed_hosts or ("127.0.0.1:*", "localhost:*", "[::1]:*",
                                                f"{s.host}:*"))
        origins = [f"{scheme}://{h}" for h in allowed for scheme in ("http", "https")]
        self.manager = StreamableHTTPSessionManager(
            self.server, security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=allowed,
                allowed_origins=origins),
            max_request_body_size=s.max_frame_bytes)
        # 2025 sessions, by MCP session id: the latest request's ServerSession (any of a
        # connection's sends its standalone notifications) and its caller; one that fails is
        # forgotten
        self.sessions: dict[str, tuple[ServerSession, str]] = {}
        self._seen = mcp_tools.fingerprint(self.services.registry)
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        self.services.registry.listen(self._registry_changed)
        front.mount("/mcp", self.app)

    # ------------------------------------------------------------ ASGI

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app: the lifespan runs the SDK's session manager; requests go to it."""
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            async with self.manager.run():
                self._running = True
                await send({"type": "lifespan.startup.complete"})
                try:
                    await receive()  # lifespan.shutdown
                finally:
                    self._running = False
                    if self._timer is not None:
                        self._timer.cancel()
                    self.listens.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await self.manager.handle_request(with_principal(scope), receive, send)

    # ------------------------------------------------------------ tools

    async def list_tools(self, ctx: Ctx, params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        self._remember(ctx)  # told when the list changes
        s = self.services
        return types.ListToolsResult(tools=[
            *(mcp_tools.tool(spec)
              for spec in mcp_tools.specs(caller_of(ctx), s.registry, s.trust)),
            mcp_tools.intent_tool()])

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        self._remember(ctx)
        caller = caller_of(ctx)
        meta: dict[str, Any] = dict(ctx.meta or {})
        key = meta.get(mcp_tools.IDEMPOTENCY_META) or _header(ctx, "idempotency-key")
        timeout = _timeout(meta.get(TIMEOUT_META, _header(ctx, "x-reach-timeout")))
        token = meta.get("progressToken", meta.get("progress_token"))
        progress = None if token is None else _Progress(ctx.session, token, ctx.request_id)
        args = dict(params.arguments or {})
        by_intent = params.name == mcp_tools.INTENT_TOOL
        name, intent = params.name, None
        if by_intent:
            name, intent = str(args.get("choose") or ""), str(args.get("intent") or "")
            args = dict(args.get("params") or {})
        req = SubmitRequest(name, args, caller, None if key is None else str(key), 5, timeout,
                            traceparent=_header(ctx, "traceparent"), intent=intent,
                            call=True)
        try:
            task, _ = await self.front.admit(req, None if progress is None else progress.sink)
            try:
                done = await self.front.finished(task, timeout)
            except asyncio.CancelledError:
                # The client went away or cancelled the request: the call is cancelled too,
                # unless it carries an idempotency key (a retry of it is coming, and joins it).
                if key is None:
                    self.services.gateway.cancel(task.task_id, caller,
                                                 "the MCP client cancelled the call")
                raise
            if progress is not None:
                await progress.flush()
        except ReachError as exc:
            if by_intent and exc.code == "no_route":
                return mcp_tools.refusal(exc.to_wire())
            raise mcp_tools.fault(exc.to_wire()) from None
        except HttpProblem as exc:
            raise mcp_tools.fault(exc.error.to_wire()) from None
        if done.state is TaskState.SUCCEEDED:
            return mcp_tools.success(done.result)
        return mcp_tools.failure(done.error or {"code": "task_failed",
                                                "message": "task failed"})

    # ------------------------------------------------------------ list_changed

    def _remember(self, ctx: Ctx) -> None:
        sid = _header(ctx, "mcp-session-id")
        if sid is not None and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            self.sessions.pop(sid, None)
            self.sessions[sid] = (ctx.session, caller_of(ctx))
            while len(self.sessions) > MAX_SESSIONS:  # the oldest unheard-of go first
                del self.sessions[next(iter(self.sessions))]

    def _registry_changed(self, record: AgentRecord) -> None:
        if self._running and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(DEBOUNCE, self._settle)

    def _settle(self) -> None:
        self._timer = None
        now = mcp_tools.fingerprint(self.services.registry)
        if now != self._seen:
            moved = mcp_tools.changed(self._seen, now)
            self._seen = now
            asyncio.get_running_loop().create_task(self._announce(moved),
                                                   name="mcp-list-changed")

    async def _announce(self, moved: dict[str, str]) -> None:
        """Tell of a change the callers who may call a capability that came, went or changed
        (another caller's tools are none of its business, not even that they changed): on
        their 2026 listen streams, and on their open 2025 sessions."""
        calls, concerned = self.services.trust.calls, dict[str, bool]()

        def concerns(caller: str) -> bool:
            if caller not in concerned:
                concerned[caller] = any(calls.allows(caller, name, scope)
                                        for name, scope in moved.items())
            return concerned[caller]

        await self.listens.publish([c for c in self.listens.callers() if concerns(c)],
                                   ToolsListChanged())
        for sid, (session, caller) in list(self.sessions.items()):
            if not concerns(caller):
                continue
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a closed session: forgotten
                log.debug("list_changed not sent to a closed session: %r", exc)
                self.sessions.pop(sid, None)


def _timeout(given: Any) -> float | None:
    """The call's timeout in seconds (``_meta``'s ``TIMEOUT_META``, else the
    ``X-Reach-Timeout`` header), bounded as the REST door bounds it; None: not given."""
    if given is None:
        return None
    try:
        return Headers.model_validate({"X-Reach-Timeout": given}).timeout
    except ValidationError:
        raise mcp_tools.fault(InvalidParams(
            f"the timeout {str(given)[:40]!r} ({TIMEOUT_META} or X-Reach-Timeout) is not a "
            f"number of seconds > 0 and at most {MAX_TIMEOUT:g}").to_wire()) from None


def _header(ctx: Ctx, name: str) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return None if value is None else str(value)


class _Progress:
    """A chunk sink that sends each chunk as a progress notification, in order;
    ``flush`` waits for those sent so far (the result goes after the last of them). Each is
    related to its request, so over Streamable HTTP it travels on the request's own stream,
    ahead of the result (unrelated, it went on the session's GET stream and could come after
    the result, when a client drops it)."""

    def __init__(self, session: ServerSession, token: str | int,
                 request_id: str | int | None = None) -> None:
        self.session = session
        self.token = token
        self.related = None if request_id is None else str(request_id)
        self.queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.pump: asyncio.Task[None] | None = None

    def sink(self, task_id: str, seq: int, chunk: Any) -> None:
        self.queue.put_nowait((seq, chunk))
        if self.pump is None or self.pump.done():
            self.pump = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while not self.queue.empty():
            seq, chunk = self.queue.get_nowait()
            try:
                await self.session.send_progress_notification(
                    self.token, float(seq + 1), message=json.dumps(chunk),
                    related_request_id=self.related)
            except Exception as exc:  # the client left: the call goes on
                log.debug("progress not sent: %r", exc)

    async def flush(self) -> None:
        if self.pump is not None:
            await self.pump
