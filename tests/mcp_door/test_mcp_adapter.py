"""MCP servers as Reach capabilities: a server written with the official SDK (stdio, a real
subprocess), attached with ``McpServer``, called through ``Client``, and killed mid-call."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from mcp_door.conftest import FAST

from reach import Client, Reach, TaskError
from reach.adapters import McpServer
from reach.errors import InvalidParams, TaskFailed

SERVER = str(Path(__file__).with_name("weather_server.py"))


async def test_tools_become_capabilities_called_through_reach(tmp_path: Path) -> None:
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(McpServer(
            "weather", command=[sys.executable, SERVER, str(tmp_path / "marker")]))
        assert view["kind"] == "mcp"
        specs = {s.name: s for s in reach.adapters["weather"].specs}
        assert set(specs) == {"weather.forecast", "weather.flaky", "weather.book",
                              "weather.refuse"}
        assert specs["weather.forecast"].idempotent and specs["weather.forecast"].scope == "read"
        assert specs["weather.book"].scope == "write" and not specs["weather.book"].idempotent
        assert specs["weather.forecast"].params["required"] == ["city"]
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("weather.forecast", {"city": "Oslo"}) == {
                "city": "Oslo", "temp": 21}
            with pytest.raises(InvalidParams):  # Reach checks the tool's input schema
                await client.call("weather.forecast", {"town": "Oslo"})
            with pytest.raises(TaskError) as refused:
                await client.call("weather.refuse", {"order": "o-1"})
            assert "no such order" in str(refused.value)


async def test_a_server_killed_mid_call_is_retried_if_idempotent_else_dead_lettered(
        tmp_path: Path) -> None:
    async with Reach.start(**{**FAST, "max_retries": 3}) as reach:
        await reach.attach(McpServer(
            "weather", command=[sys.executable, SERVER, str(tmp_path / "marker")]))
        async with Client.connect(reach.url, "tester") as client:
            # the first call kills the server; the retry reaches the restarted one
            assert await client.call("weather.flaky", {"city": "Rome"}, timeout=20) == {
                "city": "Rome", "survived": True}
            assert (tmp_path / "marker").exists()
            with pytest.raises(TaskFailed) as lost:
                await client.call("weather.book", {"room": "r1"}, timeout=20)
            assert not isinstance(lost.value, TaskError)
        assert any(t["capability"] == "weather.book" for t in reach.dead_letters())


async def test_a_streamable_http_server_s_list_changed_updates_the_capabilities() -> None:
    """Upstream: a coordinator serving MCP (the SDK's low-level Server); downstream: another
    attaching it by URL. An agent joining upstream adds a tool; downstream follows."""
    from mcp_door.conftest import serve

    from reach import Agent

    # Liveness is not under test. The attached server's beats are the downstream
    # coordinator's own health checks, in this same process: a clean-clone CI run stood
    # still for 1.09 s, past the 1 s (two beats) after which "up" is suspected, and the
    # first call was refused as unavailable. Suspected after 10 beats here.
    slack = dict(FAST, suspect_after=10, offline_after=20)
    async with Reach.start(**slack, mcp=True) as upstream, Reach.start(**slack) as reach:
        assert upstream.mcp_url is not None
        first = Agent("first", reconnect_base=0.02)

        @first.capability("hello.say", idempotent=True)
        async def hello(name: str) -> dict[str, str]:
            return {"hello": name}
        await first.connect(upstream.url)
        second = serve(Agent("second", reconnect_base=0.02))
        try:
            await reach.attach(McpServer("up", url=upstream.mcp_url))
            async with Client.connect(reach.url, "tester") as client:
                assert await client.call("up.hello.say", {"name": "a"}) == {"hello": "a"}
                await second.connect(upstream.url)
                for _ in range(1000):  # the update arrives within the debounce and a round trip
                    if "up.echo.run" in reach.registry.index:
                        break
                    await asyncio.sleep(0.01)
                assert await client.call("up.echo.run", {"x": 1}) == {"echo": {"x": 1}}
                assert await client.call("up.hello.say", {"name": "b"}) == {"hello": "b"}
        finally:
            await second.close(drain=0.2)
            await first.close(drain=0.2)


@pytest.mark.parametrize("kw", [{}, {"url": "http://x/mcp", "command": ["x"]},
                                {"command": "python server.py"}, {"command": []}])
def test_an_mcp_server_needs_one_url_or_one_command_list(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="agent 'w'"):
        McpServer("w", **kw)  # type: ignore[arg-type]


async def test_an_unreachable_mcp_server_is_not_attached() -> None:
    async with Reach.start(**FAST) as reach:
        with pytest.raises(ValueError, match="could not reach the MCP server"):
            await reach.attach(McpServer("gone", url="http://127.0.0.1:9/mcp",
                                         connect_timeout=0.5))
        assert "gone" not in reach.adapters
