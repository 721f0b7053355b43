"""A coordinator serving MCP at /mcp, a websocket agent, and the official MCP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel

from reach import Agent, TaskError

FAST: dict[str, Any] = dict(heartbeat_interval=0.5, ack_timeout=1.0, recovery_grace=0.2,
                            drain_timeout=0.5)


class Order(BaseModel):
    order: str


def serve(agent: Agent) -> Agent:
    @agent.capability("echo.run", idempotent=True, description="say it back",
                      returns={"type": "object"})
    async def echo(**params: Any) -> dict[str, Any]:
        return {"echo": params}

    @agent.capability("orders.cancel", params=Order, scope="write")
    async def cancel(order: str) -> dict[str, Any]:
        raise TaskError(f"no such order {order!r}", order=order)

    @agent.capability("boom.run")
    async def boom() -> None:
        raise RuntimeError("the handler crashed")

    @agent.capability("words.stream")
    async def words(n: int = 3) -> Any:
        for i in range(n):
            yield {"i": i}

    return agent


@asynccontextmanager
async def mcp_client(url: str, token: str | None = None, *,
                     headers: dict[str, str] | None = None, **kw: Any) -> AsyncIterator[Client]:
    """The official client over Streamable HTTP, with a bearer token when given, and
    ``headers`` on every request it sends."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(headers=sent, timeout=10) as http:
        async with Client(streamable_http_client(url, http_client=http), **kw) as client:
            yield client
