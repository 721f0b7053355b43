"""``McpServer(url=...)``: an MCP server over Streamable HTTP that restarts on its port is
reached again, and a call in flight while the server's tool list changes finishes."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

from mcp_door.conftest import FAST, serve

from reach import Agent, Client, Reach, TaskError
from reach.adapters import McpServer
from reach.errors import ReachError

SERVER = str(Path(__file__).with_name("weather_server.py"))


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def weather(port: int) -> AsyncIterator[None]:
    """The weather server as a process of its own serving ``port``, until the block ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, SERVER, "--http", str(port),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with asyncio.timeout(30):  # it listens once the SDK is imported
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.01)
                    continue
                writer.close()
                break
        yield
    finally:
        process.terminate()
        await process.wait()


async def test_a_server_restarted_on_its_port_is_reached_again() -> None:
    port = _free_port()
    async with Reach.start(**FAST) as reach:
        async with weather(port):
            await reach.attach(McpServer("weather", url=f"http://127.0.0.1:{port}/mcp",
                                            health_interval=3600))
            async with Client.connect(reach.url, "tester") as client:
                assert await client.call("weather.forecast", {"city": "Oslo"}) == {
                    "city": "Oslo", "temp": 21}
        async with weather(port):  # the same port, a new process: no session of ours
            async with Client.connect(reach.url, "tester") as client:
                # A write first: the old session's 404 proves it never ran, so it is not
                # dead-lettered as a call that may have run.
                async with asyncio.timeout(20):  # reconnect backoff: at most 2 s a try
                    while True:
                        try:
                            await client.call("weather.refuse", {"order": "o-1"}, timeout=5)
                        except TaskError:  # the tool's own answer: it was reached
                            break
                        except ReachError:
                            await asyncio.sleep(0.05)
                assert await client.call("weather.forecast", {"city": "Rome"}) == {
                    "city": "Rome", "temp": 21}
        # (no letter of a call the server took: one refused while reconnecting never ran)
        assert [d for d in reach.dead_letters() if d["attempts"]] == []
        assert "weather" in {a["name"] for a in reach.agents()}


async def test_a_call_in_flight_across_a_list_changed_finishes() -> None:
    """Upstream: a coordinator serving MCP; downstream: another attaching it by URL. A call
    is held upstream while an agent joins there (the tool list changes and downstream
    updates the registration in place); the held call then finishes."""
    async with Reach.start(**FAST, mcp=True) as upstream, Reach.start(**FAST) as reach:
        assert upstream.mcp_url is not None
        first, go, started = Agent("first", reconnect_base=0.02), asyncio.Event(), \
            asyncio.Event()

        @first.capability("report.build", idempotent=True)
        async def build() -> dict[str, bool]:
            started.set()
            await go.wait()
            return {"built": True}
        await first.connect(upstream.url)
        second = serve(Agent("second", reconnect_base=0.02))
        try:
            await reach.attach(McpServer("up", url=upstream.mcp_url))
            async with Client.connect(reach.url, "tester") as client:
                held = asyncio.ensure_future(client.call("up.report.build", {}, timeout=20))
                await asyncio.wait_for(started.wait(), 10)
                await second.connect(upstream.url)  # upstream's tools change
                async with asyncio.timeout(10):
                    while "up.echo.run" not in _capabilities(reach, "up"):
                        await asyncio.sleep(0.01)
                assert not held.done()
                go.set()
                assert await asyncio.wait_for(held, 10) == {"built": True}
                assert await client.call("up.echo.run", {"x": 1}) == {"echo": {"x": 1}}
        finally:
            await second.close(drain=0.2)
            await first.close(drain=0.2)


def _capabilities(reach: Reach, name: str) -> list[str]:
    return next((list(a["capabilities"]) for a in reach.agents() if a["name"] == name), [])
