"""An MCP server as a Reach agent: each tool ``t`` of server ``name`` is capability ``name.t``.

    await reach.attach(McpServer("weather", url="http://127.0.0.1:8000/mcp"))
    await reach.attach(McpServer("files", command=["python", "files_server.py"]))

The official ``mcp`` client (extra ``agent-reach[mcp]``) holds the connection in a task of
its own (the SDK's task groups must be entered and left in one task) and reconnects when it
drops (a server restarted; a stdio server's process is started again). Each tool's input
schema is the capability's params (Reach validates before calling), its output schema is
``returns``, ``readOnlyHint`` makes it a ``read`` (else ``write``), ``idempotentHint`` (or
read-only) makes it idempotent, so retries and hedges follow the server's own word.

A tool result with ``isError`` is a deliberate answer (``TaskError``); a JSON-RPC error or a
connection lost mid-call is a fault (retried if idempotent, else dead-lettered); no
connection at all, or a session the server no longer knows (it restarted: the request was
refused unrun; the client reconnects), is ``Undelivered``. Health is a ``ping``. The server's
``tools/list_changed`` re-reads the tools and updates the registration in place
(``Membership.update``): calls in flight go on, new calls see the new list.
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered, declare
from reach.core import names
from reach.ports import Reply, Work

log = logging.getLogger("reach.adapters.mcp")
_PENDING = "pending.tools"  # a placeholder until the tools are read (in open)
BACKOFF = (0.05, 0.2, 1.0, 2.0)  # seconds between reconnects
# What the SDK says when a Streamable HTTP server answers 404 to our session id (it was
# restarted, or dropped the session): the request was refused before it ran. (Its words:
# the SDK leaves the JSON-RPC code open, python-sdk issue 1821.)
SESSION_GONE = frozenset({"Session not found", "Session terminated"})


class McpServer(Adapter):
    """An MCP server over Streamable HTTP (``url``) or stdio (``command``)."""

    kind = "mcp"
    OWN_KEYS = frozenset({"tool"})

    def __init__(self, name: str, url: str | None = None, *,
                 command: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
                 headers: Mapping[str, str] | None = None, max_concurrency: int = 16,
                 health_interval: float | None = None, connect_timeout: float = 10.0) -> None:
        if (url is None) == (command is None):
            raise ValueError(f"agent {name!r}: give either url= (Streamable HTTP) or "
                             f"command= (stdio), not both or neither")
        if command is not None and (isinstance(command, str) or not command):
            raise ValueError(f"agent {name!r}: command is a list: program and arguments")
        super().__init__(name, {_PENDING: {}}, max_concurrency=max_concurrency,
                         health_interval=health_interval)
        self.capabilities, self._routed = {}, {}
        self.url = url
        self.command = None if command is None else [str(c) for c in command]
        self.env = None if env is None else dict(env)
        self.headers = dict(headers or {})
        self.connect_timeout = connect_timeout
        self.client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._wake = asyncio.Event()  # the connection is broken, or we are shutting
        self._stopping = False
        self._refreshing: set[asyncio.Task[None]] = set()

    def describe(self) -> dict[str, Any]:
        return {"url": self.url} if self.url is not None else {"argv": self.command}

    # ------------------------------------------------------------ connection

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        async with AsyncExitStack() as stack:
            if self.url is not None:
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers=self.headers, timeout=httpx2.Timeout(None,
                                                                 connect=self.connect_timeout)))
                transport: Any = streamable_http_client(self.url, http_client=http)
            else:
                assert self.command is not None
                transport = StdioServerParameters(command=self.command[0],
                                                  args=self.command[1:], env=self.env)
            yield await stack.enter_async_context(Client(
                transport, mode="legacy", message_handler=self._message))

    async def _hold(self) -> None:
        """Hold the connection; reconnect (with backoff) whenever it breaks."""
        failures = 0
        while not self._stopping:
            try:
                async with self._connect() as client:
                    if self.capabilities:  # a reconnect: the tools may have changed
                        self._declare_tools(await client.list_tools())
                        self._update_registration()
                    self.client, failures = client, 0
                    self._connected.set()
                    await self._wake.wait()
            except Exception as exc:
                log.info("agent %s: MCP connection ended: %r", self.name, exc)
            finally:
                self.client = None
                self._connected.clear()
            self._wake.clear()
            if not self._stopping:
                await asyncio.sleep(BACKOFF[min(failures, len(BACKOFF) - 1)])
                failures += 1

    def _broken(self) -> None:
        self._wake.set()

    async def open(self) -> None:
        self._stopping = False
        self._runner = asyncio.get_running_loop().create_task(self._hold(),
                                                              name=f"reach-mcp-{self.name}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._connected.wait()
            assert self.client is not None
            self._declare_tools(await self.client.list_tools())
        except BaseException as exc:
            await self.shut()
            raise ValueError(f"agent {self.name!r}: could not reach the MCP server "
                             f"{self.url or self.command}: {exc!r}") from None

    async def shut(self) -> None:
        self._stopping = True
        self._wake.set()
        runner, self._runner = self._runner, None
        for task in list(self._refreshing):
            task.cancel()
        if runner is not None:
            await asyncio.gather(runner, return_exceptions=True)

    # ------------------------------------------------------------ tools

    def _declare_tools(self, listed: types.ListToolsResult) -> None:
        table: dict[str, Any] = {}
        for tool in listed.tools:
            hints = tool.annotations or types.ToolAnnotations()
            read = bool(hints.read_only_hint)
            table[f"{self.name}.{tool.name}"] = {
                "tool": tool.name, "params": dict(tool.input_schema),
                "returns": None if tool.output_schema is None else dict(tool.output_schema),
                "scope": "read" if read else "write",
                "idempotent": bool(hints.idempotent_hint) or read,
                "description": (tool.description or "")[:5000]}
        if not table:
            raise ValueError(f"agent {self.name!r}: the MCP server lists no tools")
        declared = declare(self.name, table, self.OWN_KEYS)
        self.capabilities = declared
        self._routed = {names.normalize(cap): d for cap, d in declared.items()}

    def _update_registration(self) -> None:
        if self.membership is not None:
            self.membership.update(self, self.specs)

    async def _message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            task = asyncio.get_running_loop().create_task(self._refresh())
            self._refreshing.add(task)
            task.add_done_callback(self._refreshing.discard)

    async def _refresh(self) -> None:
        client = self.client
        if client is None:
            return  # the reconnect reads the list anyway
        try:
            self._declare_tools(await client.list_tools())
        except Exception as exc:
            log.warning("agent %s: the changed tool list could not be read: %r", self.name, exc)
            return
        self._update_registration()

    # ------------------------------------------------------------ calls

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        client = self.client
        if client is None:
            raise Undelivered(f"no connection to the MCP server of {self.name!r} (reconnecting)")
        try:
            result = await client.call_tool(how["tool"], work.params)
        except MCPError as exc:
            if exc.error.message in SESSION_GONE:  # a restarted server: it never ran this
                self._broken()
                raise Undelivered(f"the MCP server of {self.name!r} no longer knows our "
                                  f"session (restarted?); reconnecting") from None
            raise AdapterFault(exc.error.message, mcp_code=exc.error.code) from None
        except httpx2.ConnectError as exc:
            self._broken()
            raise Undelivered(f"the MCP server of {self.name!r} refused: {exc}") from None
        except Exception as exc:  # the connection broke mid-call: maybe it ran, maybe not
            self._broken()
            raise AdapterFault(f"the MCP connection broke mid-call: {exc!r}") from None
        if result.is_error:
            raise AdapterAnswer(_text(result) or "the tool reported an error")
        if result.structured_content is not None:
            return result.structured_content
        text = _text(result)
        try:
            return json.loads(text)
        except ValueError:
            return text

    async def check(self) -> bool:
        client = self.client
        if client is None:
            return False
        try:
            # ping is deprecated for the 2026 revision only; this connection is a 2025 session
            # (the warning is raised when the call is made, before the first await)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                ping = client.send_ping()
            await ping
        except Exception:
            self._broken()
            raise
        return True


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))
