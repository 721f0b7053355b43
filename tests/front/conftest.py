"""A real coordinator with its REST front door, a real websocket agent, and an HTTP client.

The agent serves one capability of each kind a caller over HTTP can meet: a quick idempotent
echo, a params schema, a stream, a slow one (for timeouts and back-pressure), a deliberate
answer (TaskError) and a fault (a crash, not idempotent: no retry, a dead letter).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest_asyncio
from pydantic import BaseModel

from reach import Agent, Reach, TaskError

# Liveness is not what these tests are about: a beat every 0.5 s (suspected after 1 s of
# silence) so that a loaded CI machine's stall does not turn the agent away mid-test (at 0.05 s
# one stall of 100 ms made a submit 503 in a clean-clone run). A closed agent is suspected at
# once whatever the interval.
FAST: dict[str, Any] = dict(heartbeat_interval=0.5, ack_timeout=1.0, recovery_grace=0.2,
                            drain_timeout=0.5)


class SalesQuery(BaseModel):
    region: str
    quarter: str


def serve(agent: Agent) -> Agent:
    """Declare the test capabilities on ``agent``."""

    @agent.capability("echo.run", idempotent=True, latency_ms=200,
                      intents=["echo this back", "repeat my words"])
    async def echo(**params: Any) -> dict[str, Any]:
        return {"echo": params}

    @agent.capability("sales.query", params=SalesQuery, latency_ms=200)
    async def sales(region: str, quarter: str) -> dict[str, Any]:
        return {"region": region, "quarter": quarter, "total": 42}

    @agent.capability("text.generate", latency_ms=500)
    async def generate(n: int = 3, fail: bool = False, pause: float = 0.0
                       ) -> AsyncIterator[dict[str, int]]:
        for i in range(n):
            if pause:
                await asyncio.sleep(pause)
            yield {"i": i}
        if fail:
            raise TaskError("the generator ran out of words")

    @agent.capability("slow.run", latency_ms=2000)
    async def slow(seconds: float = 0.5) -> dict[str, float]:
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    @agent.capability("refuse.run", latency_ms=200)
    async def refuse(order: str = "x") -> None:
        raise TaskError(f"no such order {order!r}", order=order)

    @agent.capability("boom.run", latency_ms=200)
    async def boom() -> None:
        raise RuntimeError("the handler crashed")

    return agent


@dataclass
class Front:
    reach: Reach
    agent: Agent
    http: aiohttp.ClientSession

    @property
    def url(self) -> str:
        assert self.reach.http_url is not None
        return self.reach.http_url

    async def post(self, path: str, body: Any = None, *, raw: bytes | None = None,
                   headers: dict[str, str] | None = None, **kw: Any
                   ) -> tuple[int, dict[str, Any], aiohttp.ClientResponse]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        async with self.http.post(self.url + path, data=data, headers=headers, **kw) as r:
            return r.status, await r.json(content_type=None), r

    async def get(self, path: str, *, headers: dict[str, str] | None = None, **kw: Any
                  ) -> tuple[int, dict[str, Any], aiohttp.ClientResponse]:
        async with self.http.get(self.url + path, headers=headers, **kw) as r:
            return r.status, await r.json(content_type=None), r


async def open_front(**options: Any) -> AsyncIterator[Front]:
    settings = {**FAST, **options}
    agent_token = settings.pop("agent_token", None)
    async with Reach.start(**settings) as reach:
        agent = serve(Agent("worker", token=agent_token, reconnect_base=0.02))
        await agent.connect(reach.url)
        async with aiohttp.ClientSession() as http:
            try:
                yield Front(reach, agent, http)
            finally:
                await agent.close(drain=0.5)


@pytest_asyncio.fixture
async def front() -> AsyncIterator[Front]:
    async for f in open_front():
        yield f
