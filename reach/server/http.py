"""Plain HTTP on the coordinator's port, and the listening socket that serves it with the
websocket sessions: ``GET /metrics`` (Prometheus text), ``GET /mcp`` (a redirect to the MCP
door, so ``reach mcp --url ws://...`` finds it), a 503 before the upgrade when the
connection cap is reached, and the websocket handshake for everything else."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from reach.config import loopback
from reach.server.channel import Channel
from reach.server.prom import CONTENT_TYPE_LATEST, Exporter
from reach.server.services import Services


class Routes:
    """What an HTTP request gets before (or instead of) the websocket handshake."""

    def __init__(self, services: Services, channel: Channel,
                 mcp_port: Callable[[], int | None] = lambda: None) -> None:
        self._settings = services.settings
        self._mcp_port = mcp_port  # the MCP door's port once it listens; None: no MCP door
        self._channel = channel
        self._admin_token = services.admin_token
        self._exporter = Exporter(services.gateway, services.registry)

    def _admin(self, request: Request) -> bool:
        given = request.headers.get("Authorization", "")
        return secrets.compare_digest(given.encode(),
                                      f"Bearer {self._admin_token}".encode())

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        """``GET /metrics`` (Prometheus text format), ``GET /mcp`` (where the MCP door is);
        anything else goes on to the websocket handshake. Metrics answer loopback peers
        only unless ``metrics_public``."""
        path = request.path.split("?", 1)[0]
        if path == "/mcp":
            return self._mcp(connection, request)
        if path != "/metrics":
            # Refused before the upgrade: no session is built for it. An operator presenting
            # the admin token in the handshake (``Authorization: Bearer TOKEN``, as the
            # dashboard does) still gets in, on the seats kept for the admin feed.
            if self._channel.full and not (self._channel.admin_room and self._admin(request)):
                return connection.respond(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "the coordinator is at its connection limit (max_connections); retry "
                    "later or on another coordinator\n")
            return None
        peer = str(connection.remote_address[0]) if connection.remote_address else ""
        if not self._settings.metrics_public and not loopback(peer):
            return connection.respond(
                HTTPStatus.FORBIDDEN,
                "/metrics answers loopback peers only; start with metrics_public=True\n")
        response = connection.respond(HTTPStatus.OK, "")
        body = self._exporter.render()
        response.body = body
        del response.headers["Content-Type"]
        del response.headers["Content-Length"]
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        response.headers["Content-Length"] = str(len(body))
        return response

    def _mcp(self, connection: ServerConnection, request: Request) -> Response:
        """``GET /mcp``: 307 to the MCP door on the HTTP port, under the name the client
        used for this host; 404 saying how to start one when there is none. It tells only
        a port number: the door itself checks tokens."""
        port = self._mcp_port()
        if port is None:
            return connection.respond(
                HTTPStatus.NOT_FOUND, "this coordinator serves no MCP: start it with "
                "`reach serve --mcp` (Reach.start(mcp=True)); docs/mcp.md\n")
        host = request.headers.get("Host", "") or self._settings.host
        name, colon, given = host.rpartition(":")
        if colon and given.isdigit() and not name.endswith(":"):
            host = name
        url = f"http://{host}:{port}/mcp"
        response = connection.respond(HTTPStatus.TEMPORARY_REDIRECT, url + "\n")
        response.headers["Location"] = url
        return response


async def listen(services: Services, channel: Channel,
                 mcp_port: Callable[[], int | None] = lambda: None) -> Server:
    """Bind the coordinator's port: websocket sessions and the HTTP routes on one socket
    (``mcp_port``: the MCP door's port, for ``GET /mcp``)."""
    s = services.settings
    return await serve(channel.handle, s.host, s.port,
                       max_size=s.max_frame_bytes, compression=None,
                       ping_interval=s.ping_interval, ping_timeout=s.ping_timeout,
                       open_timeout=s.hello_timeout, close_timeout=1.0,
                       process_request=Routes(services, channel, mcp_port),
                       create_connection=channel.connection_class(),
                       logger=Throttled(logging.getLogger("websockets.server")))


class Throttled(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The websockets server's logger, saying each distinct message at most once a second: at
    the file-descriptor limit, failed handshakes would otherwise fill the log at MB/s."""

    def __init__(self, logger: logging.Logger, every: float = 1.0) -> None:
        super().__init__(logger, {})
        self.every = every
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        key, now = str(msg), time.monotonic()
        if now - self._last.get(key, -self.every) < self.every:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = now
        quiet = self._quiet.pop(key, 0)
        if quiet:
            msg = f"{msg} (and {quiet} more like it in the last {self.every:.0f}s)"
        super().log(level, msg, *args, **kwargs)
