"""``reach mcp``: a stdio MCP server in front of a coordinator, for desktop hosts that spawn
their MCP servers as commands.

It relays to the coordinator's MCP endpoint (``reach serve --mcp`` prints it; the door is
``mcp_door``; given the websocket URL, ``resolve`` asks that port where the door is) with
the official client: ``tools/list`` and ``tools/call`` go upstream under
the token given, so the tools, the permissions and every guarantee (the gateway's) are the
coordinator's; results, ``is_error`` and JSON-RPC errors (Reach's code in ``data``) come
back unchanged, progress is forwarded, and the coordinator's ``tools/list_changed`` is
passed on to the host.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server

from reach._version import __version__
from reach.server.mcp_door import Ctx, ReachServer


class Relay:
    """The stdio server's handlers, relaying to one upstream MCP client."""

    def __init__(self, upstream_url: str, token: str | None) -> None:
        self.url = upstream_url
        self.token = token
        self.upstream: Client | None = None
        self.downstream: ServerSession | None = None  # the host's session (list_changed)

    async def _changed(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and \
                self.downstream is not None:
            await self.downstream.send_tool_list_changed()

    async def list_tools(self, ctx: Ctx, params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        self.downstream = ctx.session
        assert self.upstream is not None
        return types.ListToolsResult(tools=(await self.upstream.list_tools()).tools)

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        self.downstream = ctx.session
        assert self.upstream is not None
        meta = dict(ctx.meta or {})
        token = meta.pop("progressToken", meta.pop("progress_token", None))
        session = ctx.session

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if isinstance(token, (str, int)):
                await session.send_progress_notification(token, progress, total, message)
        return await self.upstream.call_tool(
            params.name, params.arguments, progress_callback=progress,
            meta=types.RequestParamsMeta(**meta) if meta else None)  # type: ignore[typeddict-item]

    async def serve(self) -> None:
        headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
        server = ReachServer("agent-reach", version=__version__,
                              on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers,
                                                                      timeout=None))
            self.upstream = await stack.enter_async_context(Client(
                streamable_http_client(self.url, http_client=http), mode="legacy",
                message_handler=self._changed))
            read, write = await stack.enter_async_context(stdio_server())
            await server.run(read, write, server.create_initialization_options())


def mcp_url(url: str) -> str:
    """The coordinator's MCP endpoint from an http(s) URL the user gave: its ``/mcp`` URL,
    or the REST door's base URL (``/mcp`` is added)."""
    return url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp"


async def resolve(url: str, timeout: float = 10.0) -> str:
    """The MCP endpoint for ``url``: an http(s) URL as ``mcp_url`` reads it; for the
    websocket URL (``ws://HOST:PORT``), the one its port names: ``GET /mcp`` there answers
    a redirect to the MCP door (reach/server/http.py), or 404 when the coordinator serves
    no MCP (``SystemExit`` saying to start it with ``--mcp``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        return mcp_url(url)
    scheme = "https" if parts.scheme == "wss" else "http"
    ask = urlunsplit((scheme, parts.netloc, "/mcp", "", ""))
    try:
        async with httpx2.AsyncClient(timeout=timeout) as http:
            answer = await http.get(ask)
    except httpx2.HTTPError as exc:
        raise SystemExit(f"reach mcp: no coordinator answered at {url} ({exc!r}); is "
                         f"`reach serve` running there?") from None
    location = answer.headers.get("Location")
    if answer.is_redirect and location:
        return str(location)
    if answer.status_code == 404:
        raise SystemExit(f"reach mcp: the coordinator at {url} serves no MCP; start it "
                         f"with `reach serve --mcp` (Reach.start(mcp=True)), docs/mcp.md")
    raise SystemExit(f"reach mcp: {url} answered GET /mcp with HTTP {answer.status_code}, "
                     f"not the MCP door's address; give its MCP URL, "
                     f"http://HOST:HTTP_PORT/mcp (printed by `reach serve --mcp`)")


async def run(url: str, token: str | None) -> None:
    """``reach mcp --url URL [--token T]``: serve stdio until the host closes it. ``URL``
    is the MCP endpoint, the REST door's base, or the coordinator's websocket URL."""
    endpoint = await resolve(url)
    print(f"reach mcp: relaying stdio to {endpoint}", file=sys.stderr)
    await Relay(endpoint, token).serve()
