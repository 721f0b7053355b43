"""``reach mcp``: a real subprocess speaking MCP on stdio, relaying to a coordinator's /mcp;
the official client spawns it as an MCP host would."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_door.conftest import FAST, serve

from reach import Agent, Reach
from reach.server.mcp_stdio import mcp_url, resolve


async def test_a_host_spawns_reach_mcp_and_calls_a_tool() -> None:
    async with Reach.start(**FAST, mcp=True, tokens={"tok-a": "alice", "tok-w": "worker"},
                           permissions={"alice": ("echo.*", "orders.*")}) as reach:
        assert reach.mcp_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        # The websocket URL, as an agent or a client is given: its port names the MCP door.
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "reach.cli", "mcp", "--url", reach.url,
                                          "--token", "tok-a"], env=env)
        try:
            async with Client(params, mode="legacy") as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                assert names == ["echo.run", "orders.cancel", "reach_intent"]
                result = await client.call_tool("echo.run", {"x": "y"})
                assert result.structured_content == {"echo": {"x": "y"}}
                refused = await client.call_tool("orders.cancel", {"order": "o-1"})
                assert refused.is_error
                with pytest.raises(MCPError) as bad:
                    await client.call_tool("orders.cancel", {"order": 1})
                assert bad.value.error.data["code"] == "invalid_params"
        finally:
            await agent.close(drain=0.2)


async def test_the_relay_passes_on_progress_and_list_changed() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None and reach.http_url is not None
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        changed = asyncio.Event()
        seen: list[tuple[float, str | None]] = []

        async def on_message(message: Any) -> None:
            if getattr(getattr(message, "root", message), "method", "") == \
                    "notifications/tools/list_changed":
                changed.set()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, message))
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        # The REST door's base URL is enough: the relay adds /mcp.
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "reach.cli", "mcp", "--url", reach.http_url],
            env=env)
        other = Agent("other", reconnect_base=0.02)

        @other.capability("other.ping")
        async def ping() -> str:
            return "pong"
        try:
            async with Client(params, mode="legacy", message_handler=on_message) as client:
                result = await client.call_tool("words.stream", {"n": 2},
                                                progress_callback=progress)
                assert not result.is_error
                # Every progress before the result: a host drops progress that comes after.
                assert seen == [(1.0, '{"i": 0}'), (2.0, '{"i": 1}')]
                await client.list_tools()  # the host's session is the one told of changes
                await other.connect(reach.url)  # a new tool: the list changed
                await asyncio.wait_for(changed.wait(), 10)
                assert "other.ping" in [t.name for t in (await client.list_tools()).tools]
        finally:
            await other.close(drain=0.2)
            await agent.close(drain=0.2)


async def test_the_url_given_is_the_mcp_endpoint_the_rest_base_or_the_websocket_port(
        ) -> None:
    assert mcp_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/mcp"
    assert mcp_url("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/mcp"
    assert mcp_url("http://127.0.0.1:8080/mcp") == "http://127.0.0.1:8080/mcp"
    assert await resolve("http://127.0.0.1:8080") == "http://127.0.0.1:8080/mcp"
    async with Reach.start(**FAST, mcp=True) as reach:
        assert await resolve(reach.url) == reach.mcp_url
        port = reach.url.rsplit(":", 1)[1]  # the name the client used is kept
        assert await resolve(f"ws://localhost:{port}") == \
            f"http://localhost:{reach.mcp_url.rsplit(':', 1)[1]}"


async def test_a_coordinator_without_mcp_is_said_plainly() -> None:
    async with Reach.start(**FAST) as reach:
        with pytest.raises(SystemExit, match="serves no MCP; start it with `reach serve --mcp`"):
            await resolve(reach.url)
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        spawned = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "reach.cli", "mcp", "--url", reach.url, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(spawned.communicate(), 30)
        assert spawned.returncode == 1 and b"start it with `reach serve --mcp`" in err
    with pytest.raises(SystemExit, match="no coordinator answered"):
        await resolve(reach.url, timeout=2)  # stopped: nothing listens there
