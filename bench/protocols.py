#!/usr/bin/env python3
"""MCP and A2A through Reach beside the same thing served bare, in one run.

    python bench/protocols.py            # 300 calls per row, median of 3 rounds
    python bench/protocols.py --quick    # a smoke run

Each protocol is one ``Pair``: a bare server and the same work through Reach, driven by the
official client of that protocol with the same caller code, sequentially (one call in
flight: the per-call cost each hop adds). The ratio is through-Reach time over bare time.

    mcp-bare    mcp.Client ──Streamable HTTP──▶ MCPServer (uvicorn), tool ``echo``
    mcp-reach   mcp.Client ──Streamable HTTP──▶ Reach /mcp ──ws──▶ Agent, capability ``echo``
    a2a-bare    a2a Client ──JSON-RPC──▶ a2a-sdk DefaultRequestHandler (uvicorn), an executor
    a2a-reach   a2a Client ──JSON-RPC──▶ Reach /a2a ──ws──▶ Agent, capability ``echo``

Both A2A rows send the same message (a data part ``{"capability": "echo", "params": ...}``,
non-streaming) and get a completed task with the echo as a data artifact.

To add a protocol, write an ``async def <name>_pair(calls, rounds) -> Row`` and add it to
PAIRS.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
PAYLOAD: dict[str, Any] = {"data": "x" * 200}


@dataclass
class Row:
    protocol: str
    bare_s: float  # seconds per call, bare
    reach_s: float  # seconds per call, through Reach


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _mcp_calls(url: str, tool: str, calls: int) -> float:
    from mcp import Client
    async with Client(url, mode="legacy") as client:
        await client.call_tool(tool, PAYLOAD)  # warm
        start = time.perf_counter()
        for _ in range(calls):
            await client.call_tool(tool, PAYLOAD)
        return (time.perf_counter() - start) / calls


async def _pair(name: str, door: str, app: Any, port: int, rounds: int,
                bare_calls: Callable[[], Awaitable[float]],
                reach_calls: Callable[[str], Awaitable[float]],
                lifespan: Literal["auto", "on", "off"] = "auto") -> Row:
    """The bare SDK server ``app`` on ``port`` beside a coordinator serving ``door`` ("mcp"
    or "a2a") with an echo agent; each timed ``rounds`` times, interleaved (drift hits both
    rows alike), the medians kept."""
    import uvicorn

    from reach import Agent, Reach

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan=lifespan))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        async with Reach.start(mcp=door == "mcp", a2a=door == "a2a") as reach:
            agent = Agent("echo")

            @agent.capability("echo", idempotent=True)
            async def echo_cap(data: str) -> dict[str, str]:
                return {"data": data}
            await agent.connect(reach.url)
            url = reach.mcp_url if door == "mcp" else reach.a2a_url
            assert url is not None
            bare_t, reach_t = [], []
            for _ in range(rounds):
                bare_t.append(await bare_calls())
                reach_t.append(await reach_calls(url))
            await agent.close()
    finally:
        server.should_exit = True
        await serving
    return Row(name, statistics.median(bare_t), statistics.median(reach_t))


async def mcp_pair(calls: int, rounds: int) -> Row:
    from mcp.server.mcpserver import MCPServer

    bare = MCPServer("bare")
    logging.getLogger("mcp").setLevel(logging.WARNING)  # (MCPServer logs every session at INFO)
    logging.getLogger("reach").setLevel(logging.ERROR)

    @bare.tool()
    def echo(data: str) -> dict[str, str]:
        return {"data": data}

    port = _free_port()
    return await _pair("mcp tools/call", "mcp", bare.streamable_http_app(), port, rounds,
                       lambda: _mcp_calls(f"http://127.0.0.1:{port}/mcp", "echo", calls),
                       lambda url: _mcp_calls(url, "echo", calls), lifespan="on")


async def _a2a_calls(url: str, calls: int) -> float:
    import httpx
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import new_data_message
    from a2a.types import Role, SendMessageRequest
    from a2a.types import a2a_pb2 as pb

    ask = {"capability": "echo", "params": PAYLOAD}
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=False))
        async with client:
            async def one() -> Any:
                message = new_data_message(ask, role=Role.ROLE_USER)
                async for event in client.send_message(SendMessageRequest(message=message)):
                    last = event
                return last
            warm = await one()  # both answer a completed task with the echo as its artifact
            assert warm.task.status.state == pb.TASK_STATE_COMPLETED and warm.task.artifacts, warm
            start = time.perf_counter()
            for _ in range(calls):
                await one()
            return (time.perf_counter() - start) / calls


def _bare_a2a_app(url: str) -> Any:
    """A bare a2a-sdk agent: the SDK's request handler, in-memory task store and an executor
    that answers each message with a completed task holding its data as an artifact."""
    from a2a.helpers import get_data_parts, new_data_artifact
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import a2a_pb2 as pb
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            assert context.message is not None
            [data] = get_data_parts(context.message.parts)
            await event_queue.enqueue_event(pb.Task(
                id=context.task_id, context_id=context.context_id,
                status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED),
                artifacts=[new_data_artifact("result", data["params"])]))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    card = pb.AgentCard(
        name="bare", description="echo", version="1",
        supported_interfaces=[pb.AgentInterface(url=url, protocol_binding="JSONRPC",
                                                protocol_version="1.0")],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["application/json"], default_output_modes=["application/json"],
        skills=[pb.AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])])
    handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
    return Starlette(routes=[*create_agent_card_routes(card),
                             *create_jsonrpc_routes(handler, "/")])


async def a2a_pair(calls: int, rounds: int) -> Row:


    logging.getLogger("reach").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request at INFO)
    port = _free_port()
    bare_url = f"http://127.0.0.1:{port}"
    return await _pair("a2a SendMessage", "a2a", _bare_a2a_app(bare_url), port, rounds,
                       lambda: _a2a_calls(bare_url, calls),
                       lambda url: _a2a_calls(url, calls))


PAIRS: list[Callable[[int, int], Awaitable[Row]]] = [mcp_pair, a2a_pair]


async def main(calls: int, rounds: int) -> None:
    rows = [await pair(calls, rounds) for pair in PAIRS]
    print(f"{'protocol':<18}{'bare µs/call':>14}{'reach µs/call':>15}{'ratio':>8}")
    for r in rows:
        print(f"{r.protocol:<18}{r.bare_s * 1e6:>14.0f}{r.reach_s * 1e6:>15.0f}"
              f"{r.reach_s / r.bare_s:>8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    a = parser.parse_args()
    asyncio.run(main(20 if a.quick else a.calls, 1 if a.quick else a.rounds))
