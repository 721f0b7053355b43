"""Reach as an MCP server, seen through the official ``mcp`` client over Streamable HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from counting import counting
from held import Held
from mcp.shared.exceptions import MCPError
from mcp_door.conftest import FAST, mcp_client, serve

from reach import Agent, Reach


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_tools_are_listed_and_called_through_the_gateway(mode: str) -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None and reach.mcp_url.endswith("/mcp")
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with mcp_client(reach.mcp_url, mode=mode) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert set(tools) == {"echo.run", "orders.cancel", "boom.run", "words.stream",
                                      "reach_intent"}
                echo = tools["echo.run"]
                assert echo.description == "say it back"
                assert echo.annotations is not None and echo.annotations.idempotent_hint
                assert echo.annotations.read_only_hint and echo.output_schema == {
                    "type": "object"}
                cancel = tools["orders.cancel"]
                assert cancel.input_schema["required"] == ["order"]
                assert cancel.annotations is not None and cancel.annotations.destructive_hint

                result = await client.call_tool("echo.run", {"a": 1})
                assert not result.is_error
                assert result.structured_content == {"echo": {"a": 1}}

                refused = await client.call_tool("orders.cancel", {"order": "o-9"})
                assert refused.is_error
                assert "no such order 'o-9'" in refused.content[0].text  # type: ignore[union-attr]

                with pytest.raises(MCPError) as fault:
                    await client.call_tool("boom.run", {})
                assert fault.value.error.data["code"] == "task_failed"

                with pytest.raises(MCPError) as bad:
                    await client.call_tool("orders.cancel", {"order": 3})
                assert bad.value.error.data["code"] == "invalid_params"
        finally:
            await agent.close(drain=0.2)


async def test_streaming_chunks_arrive_as_progress() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        assert reach.mcp_url is not None
        seen: list[tuple[float, str | None]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, message))
        try:
            async with mcp_client(reach.mcp_url, mode="legacy") as client:
                result = await client.call_tool("words.stream", {"n": 3},
                                                progress_callback=progress)
                assert not result.is_error
        finally:
            await agent.close(drain=0.2)
    assert seen == [(1.0, '{"i": 0}'), (2.0, '{"i": 1}'), (3.0, '{"i": 2}')]


async def test_list_changed_when_an_agent_connects() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        changed = asyncio.Event()

        async def on_message(message: Any) -> None:
            if getattr(getattr(message, "root", message), "method", "") == \
                    "notifications/tools/list_changed":
                changed.set()
        async with mcp_client(reach.mcp_url, mode="legacy",
                              message_handler=on_message) as client:
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed
            assert [t.name for t in (await client.list_tools()).tools] == ["reach_intent"]
            agent = serve(Agent("worker", reconnect_base=0.02))
            await agent.connect(reach.url)
            try:
                await asyncio.wait_for(changed.wait(), 5)
                assert len((await client.list_tools()).tools) == 5
            finally:
                await agent.close(drain=0.2)


async def test_list_changed_on_the_2026_subscription() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        async with mcp_client(reach.mcp_url, mode="2026-07-28") as client:
            async with client.listen(tools_list_changed=True) as sub:
                agent = serve(Agent("worker", reconnect_base=0.02))
                await agent.connect(reach.url)
                try:
                    async with asyncio.timeout(5):
                        async for _event in sub:
                            break
                    assert len((await client.list_tools()).tools) == 5
                finally:
                    await agent.close(drain=0.2)


async def test_a_caller_without_permission_sees_no_tool() -> None:
    async with Reach.start(**FAST, mcp=True,
                           tokens={"tok-a": "alice", "tok-b": "bob", "tok-w": "worker"},
                           permissions={"alice": ("echo.*",)}) as reach:
        assert reach.mcp_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with mcp_client(reach.mcp_url, "tok-a", mode="legacy") as alice:
                assert [t.name for t in (await alice.list_tools()).tools] == [
                    "echo.run", "reach_intent"]
                with pytest.raises(MCPError) as refused:
                    await alice.call_tool("boom.run", {})
                assert refused.value.error.data["code"] == "unauthorized"
            with pytest.raises(Exception):
                async with mcp_client(reach.mcp_url, None, mode="legacy") as nobody:
                    await nobody.list_tools()
        finally:
            await agent.close(drain=0.2)


async def test_a_retried_tool_call_with_the_same_idempotency_key_runs_once() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        async with counting(reach.url) as runs:
            async with mcp_client(reach.mcp_url, mode="legacy") as client:
                key = {"agent-reach/idempotency-key": "k-1"}
                first = await client.call_tool("count.up", {}, meta=key)  # type: ignore[arg-type]
                again = await client.call_tool("count.up", {}, meta=key)  # type: ignore[arg-type]
                other = await client.call_tool("count.up", {})
            assert first.structured_content == again.structured_content == {"n": 1}
            assert other.structured_content == {"n": 2} and len(runs) == 2


async def test_the_intent_tool_routes_words_and_a_refusal_can_be_chosen_from() -> None:
    async with Reach.start(**FAST, mcp=True) as reach:
        assert reach.mcp_url is not None
        agent = Agent("ops", reconnect_base=0.02)

        @agent.capability("refund.issue", intents=["给客户退款", "refund the customer"],
                          tags=["refund"], description="Pay a customer's money back.")
        async def refund(order: str = "") -> dict[str, Any]:
            return {"refunded": order}

        @agent.capability("returns.rate", intents=["退货率是多少", "return rate"],
                          tags=["returns"], description="The share of orders sent back.")
        async def returns() -> dict[str, Any]:
            return {"rate": 0.1}

        await agent.connect(reach.url)
        try:
            async with mcp_client(reach.mcp_url, mode="legacy") as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert tools["reach_intent"].input_schema["required"] == ["intent"]
                routed = await client.call_tool("reach_intent", {
                    "intent": "please refund the customer", "params": {"order": "7"}})
                assert not routed.is_error and routed.structured_content == {"refunded": "7"}
                words = "customer returned the goods, money please"
                refused = await client.call_tool("reach_intent", {"intent": words})
                assert refused.is_error and refused.structured_content is not None
                error = refused.structured_content["error"]
                assert error["code"] == "no_route"
                assert "refund.issue" in error["details"]["why"]
                chosen = await client.call_tool("reach_intent", {
                    "intent": words, "choose": "refund.issue", "params": {"order": "8"}})
                assert chosen.structured_content == {"refunded": "8"}
                again = await client.call_tool("reach_intent", {"intent": words})
                assert again.structured_content == {"refunded": ""}
        finally:
            await agent.close(drain=0.2)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_that_gives_up_a_call_cancels_its_task(mode: str) -> None:
    """A tool call the MCP client gives up (its request cancelled, or the client gone) is
    cancelled here too: the task ends ``cancelled`` and the agent's handler is stopped. A
    call that carries an idempotency key is not: its retry joins it."""
    async with Reach.start(**FAST, mcp=True) as reach:
        held, agent = Held(), Agent("slow", reconnect_base=0.02)
        agent.capability("report.build", latency_ms=20_000)(held.run)
        started, stopped = held.started, held.stopped
        await agent.connect(reach.url)
        try:
            assert reach.mcp_url is not None
            async with mcp_client(reach.mcp_url, mode=mode) as client:
                call = asyncio.ensure_future(client.call_tool("report.build", {}))
                await asyncio.wait_for(started.wait(), 5)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
                await asyncio.wait_for(stopped.wait(), 5)
            [task] = [t for t in reach.gateway.recent.values()
                      if t.envelope.capability == "report.build"]
            assert task.state.value == "cancelled"
            assert task.error is not None and "the MCP client cancelled the call" in \
                task.error["message"]
            started.clear()
            async with mcp_client(reach.mcp_url, mode=mode) as client:  # with a key: kept
                call = asyncio.ensure_future(client.call_tool(
                    "report.build", {}, meta={"agent-reach/idempotency-key": "r-1"}))
                await asyncio.wait_for(started.wait(), 5)
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)
            [kept] = [t for t in reach.gateway.live.values()
                      if t.envelope.capability == "report.build"]
            assert kept.state.value == "running"  # its retry, with the same key, joins it
        finally:
            await agent.close(drain=0.1)
