"""What a ``tools/call`` may say besides its arguments, through the official client: its
timeout (``_meta["agent-reach/timeout"]`` or the ``X-Reach-Timeout`` header, bounded as the
REST door bounds it) and its idempotency key as the ``Idempotency-Key`` header."""

from __future__ import annotations

import time

import pytest
from counting import counting
from held import Held
from mcp.shared.exceptions import MCPError
from mcp_door.conftest import FAST, mcp_client

from reach import Agent, Reach


@pytest.mark.parametrize("how", ["meta", "header"])
async def test_a_call_past_its_own_timeout_ends_with_the_timeout_error(how: str) -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        held, agent = Held(), Agent("slow", reconnect_base=0.02)
        # declared slow: without a timeout of its own, the call would wait 24 s
        agent.capability("report.build", latency_ms=20_000)(held.run)
        await agent.connect(reach.url)
        headers = {"X-Reach-Timeout": "0.2"} if how == "header" else {}
        meta = {"agent-reach/timeout": 0.2} if how == "meta" else None
        try:
            async with mcp_client(reach.mcp_url, mode="legacy", headers=headers) as client:
                began = time.monotonic()
                with pytest.raises(MCPError) as ended:
                    await client.call_tool("report.build", {},
                                           meta=meta)  # type: ignore[arg-type]
                assert ended.value.error.data["code"] == "timeout"
                assert time.monotonic() - began < 5
                assert held.started.is_set()
        finally:
            await agent.close(drain=0.1)


@pytest.mark.parametrize("timeout", [0, -1, "soon", 1e12])
async def test_a_timeout_out_of_bounds_is_invalid_params(timeout: object) -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        agent = Agent("worker", reconnect_base=0.02)
        runs: list[int] = []

        @agent.capability("echo.run")
        async def echo() -> dict[str, int]:
            runs.append(1)
            return {}
        await agent.connect(reach.url)
        try:
            async with mcp_client(reach.mcp_url, mode="legacy") as client:
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("echo.run", {}, meta={  # type: ignore[arg-type]
                        "agent-reach/timeout": timeout})
                assert refused.value.error.data["code"] == "invalid_params"
                assert "agent-reach/timeout" in refused.value.error.message
            assert runs == []
        finally:
            await agent.close(drain=0.1)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_retried_call_with_the_same_idempotency_key_header_runs_once(mode: str) -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        async with counting(reach.url) as runs:
            # Each client sends its header with every request: the second is a client
            # retrying the same call from scratch (a new connection and a new request id).
            for _ in range(2):
                async with mcp_client(reach.mcp_url, mode=mode,
                                      headers={"Idempotency-Key": "h-1"}) as client:
                    again = await client.call_tool("count.up", {})
                    assert again.structured_content == {"n": 1}
            async with mcp_client(reach.mcp_url, mode=mode,
                                  headers={"Idempotency-Key": "h-2"}) as client:
                other = await client.call_tool("count.up", {})
            assert other.structured_content == {"n": 2} and len(runs) == 2
