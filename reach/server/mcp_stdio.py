"""``reach mcp``: a stdio MCP server in front of a coordinator, for desktop hosts that spawn
their MCP servers as commands.

It relays to the coordinator's MCP endpoint (``reach serve --mcp`` prints it; the door is
``mcp_door``) with the official client: ``tools/list`` and ``tools/call`` go upstream under
the token given, so the tools, the permissions and every guarantee (the gateway's) are the
coordinator's; results, ``is_error`` and JSON-RPC errors (Reach's code in ``data``) come
back unchanged, progress is forwarded, and the coordinator's ``tools/list_changed`` is
passed on to the host.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from typing import Any

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
    """The coordinator's MCP endpoint from what the user gave: its ``/mcp`` URL, or the REST
    door's base URL (``/mcp`` is added)."""
    if url.startswith(("ws://", "wss://")):
        raise SystemExit(
            f"reach mcp: {url} is the websocket port; give the coordinator's MCP URL, "
            f"http://HOST:HTTP_PORT/mcp (printed by `reach serve --mcp`)")
    return url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp"


async def run(url: str, token: str | None) -> None:
    """``reach mcp --url URL [--token T]``: serve stdio until the host closes it."""
    print(f"reach mcp: relaying stdio to {mcp_url(url)}", file=sys.stderr)
    await Relay(mcp_url(url), token).serve()
