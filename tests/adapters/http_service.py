"""A REST service for the HttpAgent tests, on another stack than the adapter's aiohttp: a
plain ASGI app (no framework) served by uvicorn's h11 server, in-process on loopback.

Each request is recorded (method, raw path, query, headers, body). Routes are async
functions of the request returning ``(status, headers, body)``; a test adds or replaces them
(``service.routes["/x"] = ...``), flips ``healthy`` for ``GET /healthz``, and stops and
starts the server on the same port to play a killed and a restarted service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import uvicorn

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Seen:
    method: str
    path: str  # as sent (still percent-encoded)
    query: list[tuple[str, str]]
    headers: dict[str, str]  # lowercased names
    body: bytes
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def json(self) -> Any:
        return json.loads(self.body)


def js(status: int, value: Any, **headers: str) -> Answer:
    return status, {"content-type": "application/json", **headers}, json.dumps(value).encode()


class Service:
    """The app, its routes and what it saw; ``start``/``stop`` run it on a fixed port."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.healthy = True
        self.openapi: Any = None
        self.routes: dict[str, Callable[[Seen], Awaitable[Answer]]] = {
            "/echo": self._echo, "/text": self._text, "/empty": self._empty,
            "/missing": self._missing, "/hang": self._hang, "/openapi.json": self._openapi,
        }
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path or s.path.startswith(path + "/")]

    # ------------------------------------------------------------ routes

    async def _echo(self, req: Seen) -> Answer:
        return js(200, {"got": req.json(), "query": req.query})

    async def _text(self, req: Seen) -> Answer:
        return 200, {"content-type": "text/plain; charset=utf-8"}, "héllo".encode()

    async def _empty(self, req: Seen) -> Answer:
        return 204, {}, b""

    async def _missing(self, req: Seen) -> Answer:
        return js(404, {"error": "no such order"})

    async def _hang(self, req: Seen) -> Answer:
        await req.disconnected.wait()  # until the client goes away
        return 200, {}, b""

    async def _openapi(self, req: Seen) -> Answer:
        return js(200, self.openapi)

    async def _route(self, req: Seen) -> Answer:
        if req.path == "/healthz":
            return (200 if self.healthy else 503), {}, b""
        for prefix, handler in sorted(self.routes.items(), key=lambda kv: -len(kv[0])):
            if req.path == prefix or req.path.startswith(prefix + "/"):
                return await handler(req)
        return js(404, {"error": f"no route {req.path}"})

    # ------------------------------------------------------------ ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # killed mid-request: just end
            await self._serve(scope, receive, send)

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        req = Seen(scope["method"], scope["raw_path"].decode(),
                   parse_qsl(scope["query_string"].decode(), keep_blank_values=True),
                   {k.decode().lower(): v.decode() for k, v in scope["headers"]}, body)
        self.seen.append(req)

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            req.disconnected.set()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            status, headers, payload = await self._route(req)
            await send({"type": "http.response.start", "status": status,
                        "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
            await send({"type": "http.response.body", "body": payload})
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    # ------------------------------------------------------------ running

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self, http="h11", ws="none", lifespan="off", log_config=None,
                                access_log=False, log_level="warning",
                                timeout_graceful_shutdown=0.2)
        server = uvicorn.Server(config)
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        self._server = server
        self._task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        for _ in range(500):
            if server.started:
                return
            if self._task.done():
                await self._task
            await asyncio.sleep(0.005)
        raise RuntimeError("the test service did not start")

    async def stop(self) -> None:
        """Die as a killed process does: stop listening (the port then refuses), reset every
        open connection, drop the requests in progress."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        for listener in server.servers:
            listener.close()
        for conn in list(server.server_state.connections):
            conn.transport.abort()  # type: ignore[attr-defined]
        running = list(server.server_state.tasks)
        for t in (task, *running):
            t.cancel()
        await asyncio.gather(task, *running, return_exceptions=True)
        for listener in server.servers:
            await listener.wait_closed()


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Service]:
    service = Service()
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
