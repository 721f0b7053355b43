"""ASGI apps (the MCP and A2A SDKs' Starlette apps) served under the REST front door.

One port, one server: ``mount_asgi(app, prefix, asgi_app, ...)`` adds an aiohttp route for
``prefix`` and everything under it that runs ``asgi_app`` for each request. The request has
already passed the door's gate (connection caps, first-head timeout) and passes its edge
(bodies refused from their headers, each caller's share, problem+json), because it is an
ordinary aiohttp route; ``authorize`` (the door's token check) names the caller before the
app sees a byte, and the caller is handed to the app as ``scope["reach"]["caller"]``.

Why a bridge of our own and not ``aiohttp-asgi`` (docs/http-api.md "One door for REST, MCP
and A2A"): the route must be an ordinary aiohttp route so the edge's middleware, the gate's
request accounting and ``handler_cancellation`` apply unchanged; the body is read whole,
within ``body_timeout`` and ``max_frame_bytes`` (JSON-RPC bodies are small), before the app
runs; and the app's lifespan must run in the host's start and stop. That is a hundred-odd
lines, not a dependency.

The ASGI lifespan (``lifespan.startup`` / ``lifespan.shutdown``) runs in the aiohttp app's
``cleanup_ctx``: at the runner's setup and cleanup, i.e. ``FrontDoor.start``/``stop``. An app
that refuses lifespan (raises on a lifespan scope) is served all the same.

Scope paths follow the ASGI spec: ``path`` is the full path, ``root_path`` the prefix, so a
Starlette router inside sees routes relative to the prefix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    MutableMapping,
    Sequence,
)
from typing import Any

from aiohttp import web

from reach.errors import ProtocolError
from reach.server.front_problems import HttpProblem, problem

log = logging.getLogger("reach.front")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Coroutine[Any, Any, None]]
Authorize = Callable[[web.Request], str]
ASGI = {"version": "3.0", "spec_version": "2.3"}
LEFT_GRACE = 5.0  # seconds an app has to finish once its peer has left
HOP = frozenset({"transfer-encoding", "connection", "keep-alive"})


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """``host`` (a Host header) matches one of ``allowed``: exact, or ``name:*`` for any port
    (the MCP SDK's notation)."""
    host = host.strip().lower()
    for pattern in allowed:
        p = pattern.lower()
        if p == host or (p.endswith(":*") and host.rsplit(":", 1)[0] == p[:-2]):
            return True
    return False


def mount_asgi(app: web.Application, prefix: str, asgi_app: ASGIApp, *,
               authorize: Authorize | None = None, allowed_hosts: Sequence[str] | None = None,
               body_timeout: float = 30.0, lifespan: bool = True) -> None:
    """Serve ``asgi_app`` at ``prefix`` and below on ``app`` (before the app is started).

    ``authorize(request)`` names the caller or raises (a ``ReachError``/``HttpProblem``: the
    edge answers problem+json); ``allowed_hosts`` (None: any) refuses other ``Host`` headers
    with 421 — DNS-rebinding protection for browsers' sake; ``lifespan``: run the app's
    lifespan in the host app's startup and cleanup."""
    prefix = "/" + prefix.strip("/")
    bridge = _Bridge(asgi_app, prefix, authorize, allowed_hosts, body_timeout)
    for path in (prefix, prefix + "/{tail:.*}"):
        app.router.add_route("*", path, bridge.handle)
    if lifespan:
        app.cleanup_ctx.append(bridge.lifespan)


class _Bridge:
    def __init__(self, asgi_app: ASGIApp, prefix: str, authorize: Authorize | None,
                 allowed_hosts: Sequence[str] | None, body_timeout: float) -> None:
        self.asgi_app = asgi_app
        self.prefix = prefix
        self.authorize = authorize
        self.allowed_hosts = None if allowed_hosts is None else list(allowed_hosts)
        self.body_timeout = body_timeout

    # ------------------------------------------------------------ lifespan

    async def lifespan(self, _app: web.Application) -> AsyncIterator[None]:
        """The ASGI lifespan around the host's run: startup before the first request is
        served, shutdown at the host's cleanup (open requests are cancelled first)."""
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        outbox: asyncio.Queue[Message] = asyncio.Queue()
        scope: Scope = {"type": "lifespan", "asgi": ASGI, "state": {}}

        async def send(message: Message) -> None:
            await outbox.put(message)

        async def run() -> None:
            try:
                await self.asgi_app(scope, inbox.get, send)
            except Exception as exc:  # an app without lifespan support refuses the scope
                await outbox.put({"type": "lifespan.unsupported", "message": repr(exc)})

        task = asyncio.create_task(run(), name=f"asgi-lifespan{self.prefix}")
        await inbox.put({"type": "lifespan.startup"})
        answer = await outbox.get()
        if answer["type"] == "lifespan.startup.failed":
            task.cancel()
            raise RuntimeError(f"the app at {self.prefix} failed to start: "
                               f"{answer.get('message', '')}")
        supported = answer["type"] == "lifespan.startup.complete"
        try:
            yield
        finally:
            if supported:
                await inbox.put({"type": "lifespan.shutdown"})
                try:
                    async with asyncio.timeout(5.0):
                        await outbox.get()
                except TimeoutError:
                    log.warning("the app at %s did not shut down within 5 s", self.prefix)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # ------------------------------------------------------------ requests

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.allowed_hosts is not None and not host_allowed(
                request.headers.get("Host", ""), self.allowed_hosts):
            return problem(ProtocolError(
                f"Host {request.headers.get('Host', '')[:80]!r} is not one this coordinator "
                f"answers to (http_allowed_hosts; DNS-rebinding protection)").to_wire(), 421)
        caller = self.authorize(request) if self.authorize is not None else ""
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await request.read()
        except TimeoutError:
            raise HttpProblem(ProtocolError(
                f"the request body did not arrive within {self.body_timeout:g} s "
                f"(http_body_timeout)"), 408) from None
        return await _Exchange(request, body).run(self.asgi_app, self._scope(request, caller))

    def _scope(self, request: web.Request, caller: str) -> Scope:
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        sock = transport.get_extra_info("sockname") if transport is not None else None
        return {
            "type": "http", "asgi": ASGI,
            "http_version": f"{request.version.major}.{request.version.minor}",
            "method": request.method, "scheme": request.scheme,
            "path": request.path, "raw_path": request.raw_path.split("?", 1)[0].encode(),
            "root_path": self.prefix, "query_string": request.query_string.encode(),
            "headers": [(k.lower(), v)
                        for k, v in request.raw_headers],
            "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
            "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
            "state": {}, "reach": {"caller": caller},
        }


class _Exchange:
    """One request's ASGI conversation: the body once, then a disconnect that never comes
    before the handler ends (aiohttp cancels the handler when the peer leaves)."""

    def __init__(self, request: web.Request, body: bytes) -> None:
        self.request = request
        self.body: bytes | None = body
        self.response: web.StreamResponse | None = None
        self.done = False
        self.ended = asyncio.Event()

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.ended.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            started = web.StreamResponse(status=int(message["status"]))
            for k, v in message.get("headers", ()):
                name = k.decode("latin-1")
                if name.lower() not in HOP:
                    started.headers.add(name, v.decode("latin-1"))
            self.response = started
        elif kind == "http.response.body":
            response = self.response
            if self.done:
                return  # (a trailing empty body after the last one: nothing to write)
            if response is None:
                raise RuntimeError("http.response.body before http.response.start")
            chunk = bytes(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if not response.prepared:
                if not more and "Content-Length" not in response.headers:
                    response.content_length = len(chunk)
                await response.prepare(self.request)
            if chunk:
                await response.write(chunk)
            if not more:
                self.done = True
                await response.write_eof()

    async def run(self, app: ASGIApp, scope: Scope) -> web.StreamResponse:
        # The app runs in its own task: a peer that leaves is an ``http.disconnect`` for it
        # (ASGI's rule), not a cancellation in the middle of its bookkeeping (the MCP SDK
        # discards a session whose opening request was cancelled after it was answered).
        task = asyncio.create_task(app(scope, self.receive, self.send))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            self.ended.set()
            try:
                async with asyncio.timeout(LEFT_GRACE):
                    await asyncio.shield(task)
            except BaseException:
                task.cancel()
            raise
        except ConnectionResetError:
            raise
        except Exception:
            log.exception("the app under %s failed", scope["root_path"])
            if self.response is None or not self.response.prepared:
                return problem({"code": "reach_error", "message": "the coordinator failed to "
                                "answer this request (its log says why); retry"}, 500)
        finally:
            self.ended.set()
        answer = self.response
        if answer is None:
            return problem({"code": "reach_error", "message": "the app sent no answer"}, 500)
        if not answer.prepared:
            await answer.prepare(self.request)
        if not self.done:
            await answer.write_eof()
        return answer
