"""A coordinator serving A2A at /a2a, a websocket agent, and the official A2A client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client
from a2a.types import a2a_pb2 as pb
from aiohttp import web
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from reach import Agent, Reach, TaskError

FAST: dict[str, Any] = dict(heartbeat_interval=0.5, ack_timeout=1.0, recovery_grace=0.2,
                            drain_timeout=0.5)


def serve(agent: Agent) -> Agent:
    @agent.capability("echo.run", idempotent=True, description="say it back",
                      tags=["demo"], intents=["repeat what I say", "echo my words"])
    async def echo(**params: Any) -> dict[str, Any]:
        return {"echo": params}

    @agent.capability("math.add", params={
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False},
        intents=["add two whole numbers"])
    async def add(a: int, b: int) -> dict[str, Any]:
        assert isinstance(a, int) and isinstance(b, int)  # not 2.0: coerced at the door
        return {"sum": a + b}

    @agent.capability("orders.cancel", params={
        "type": "object", "properties": {"order": {"type": "string"}},
        "required": ["order"]}, scope="write")
    async def cancel(order: str) -> dict[str, Any]:
        raise TaskError(f"no such order {order!r}", order=order)

    @agent.capability("words.stream", params={  # "integer": n arrives as 3, not 3.0
        "type": "object", "properties": {"n": {"type": "integer"}}})
    async def words(n: int = 3) -> Any:
        for i in range(n):
            yield {"i": i}

    return agent


@asynccontextmanager
async def a2a_client(url: str, token: str | None = None, *, streaming: bool = False
                     ) -> AsyncIterator[Client]:
    """The official client, from the card at ``url``, with a bearer token when given."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=streaming))
        async with client:
            yield client


@asynccontextmanager
async def worked(reach: Reach, *, streaming: bool = False) -> AsyncIterator[Client]:
    """``serve``'s agent connected to ``reach``, and the official client of its A2A door
    (``streaming`` as ``a2a_client``'s); the agent is closed (drained) after."""
    assert reach.a2a_url is not None
    agent = serve(Agent("worker", reconnect_base=0.02))
    await agent.connect(reach.url)
    try:
        async with a2a_client(reach.a2a_url, streaming=streaming) as client:
            yield client
    finally:
        await agent.close(drain=0.2)


async def card_of(url: str, token: str | None = None) -> pb.AgentCard:
    """The card at ``url``, resolved by the official resolver."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        return await A2ACardResolver(http, url).get_agent_card()


def call(capability: str, params: dict[str, Any]) -> pb.SendMessageRequest:
    """A message asking for one capability (a data part)."""
    return pb.SendMessageRequest(message=pb.Message(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER,
        parts=[pb.Part(data=ParseDict({"capability": capability, "params": params}, Value()))]))


def say(text: str) -> pb.SendMessageRequest:
    """A message naming the work in words (a text part: intent routing)."""
    return pb.SendMessageRequest(message=pb.Message(
        message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text=text)]))


async def send(client: Client, request: pb.SendMessageRequest) -> list[pb.StreamResponse]:
    return [event async for event in client.send_message(request)]


def data(part: pb.Part) -> Any:
    return MessageToDict(part.data)


def slow(go: asyncio.Event, *, idempotent: bool = False) -> Agent:
    """An agent whose ``slow.read`` answers ``{"done": true}`` once ``go`` is set."""
    agent = Agent("slow", reconnect_base=0.02)

    @agent.capability("slow.read", idempotent=idempotent)
    async def read() -> dict[str, bool]:
        await go.wait()
        return {"done": True}
    return agent


@dataclass
class Hanging:
    """A receiver that takes a POST and answers only once ``release`` is set."""

    url: str = ""
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def hanging() -> AsyncIterator[Hanging]:
    hook = Hanging()

    async def handle(request: web.Request) -> web.Response:
        hook.entered.set()
        await hook.release.wait()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hook.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield hook
    finally:
        hook.release.set()
        await runner.cleanup()


async def accepted(client: Client, capability: str) -> pb.Task:
    """Send a message for ``capability`` that returns at once (``return_immediately``): the
    task as accepted, still running."""
    request = call(capability, {})
    request.configuration.return_immediately = True
    [event] = await send(client, request)
    return event.task
