"""``reach mcp``: a real subprocess speaking MCP on stdio, relaying to a coordinator's /mcp;
the official client spawns it as an MCP host would."""

from __future__ import annotations

import os
import sys

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_door.conftest import FAST, serve

from reach import Agent, Reach


async def test_a_host_spawns_reach_mcp_and_calls_a_tool() -> None:
    async with Reach.start(**FAST, mcp=True, tokens={"tok-a": "alice", "tok-w": "worker"},
                           permissions={"alice": ("echo.*", "orders.*")}) as reach:
        assert reach.mcp_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "reach.cli", "mcp", "--url", reach.mcp_url,
                                          "--token", "tok-a"], env=env)
        try:
            async with Client(params, mode="legacy") as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                assert names == ["echo.run", "orders.cancel"]
                result = await client.call_tool("echo.run", {"x": "y"})
                assert result.structured_content == {"echo": {"x": "y"}}
                refused = await client.call_tool("orders.cancel", {"order": "o-1"})
                assert refused.is_error
                with pytest.raises(MCPError) as bad:
                    await client.call_tool("orders.cancel", {"order": 1})
                assert bad.value.error.data["code"] == "invalid_params"
        finally:
            await agent.close(drain=0.2)
