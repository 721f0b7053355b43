"""The Agent Card: Reach's capabilities as skills, through the official A2A client."""

from __future__ import annotations

import asyncio

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as pb
from a2a_door.conftest import FAST, a2a_client, call, card_of, data, send, serve

from reach import Agent, Reach


async def test_the_card_lists_each_capability_as_a_skill_and_follows_agents() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None and reach.a2a_url.endswith("/a2a")
        empty = await card_of(reach.a2a_url)
        assert empty.name == "agent-reach" and list(empty.skills) == []
        assert empty.capabilities.streaming and not empty.security_schemes  # open mode
        assert empty.supported_interfaces[0].url == reach.a2a_url
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            card = await card_of(reach.a2a_url)
            skills = {s.id: s for s in card.skills}
            assert set(skills) == {"echo.run", "math.add", "orders.cancel", "words.stream"}
            echo = skills["echo.run"]
            assert echo.name == "echo.run" and echo.description == "say it back"
            assert list(echo.examples) == ["repeat what I say", "echo my words"]
            assert "demo" in echo.tags and "read" in echo.tags
            assert "write" in skills["orders.cancel"].tags
        finally:
            await agent.close(drain=0.2)
        async with asyncio.timeout(5):
            while (await card_of(reach.a2a_url)).skills:
                await asyncio.sleep(0.02)


async def test_a_client_is_made_from_the_card() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with a2a_client(reach.a2a_url) as client:
            assert client is not None


async def test_a_0_3_client_is_served_too() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            card = await card_of(reach.a2a_url)
            assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
            del card.supported_interfaces[0]  # as a client that speaks 0.3 only sees it
            async with httpx.AsyncClient(timeout=10) as http:
                client = await create_client(card, ClientConfig(httpx_client=http,
                                                                streaming=False))
                async with client:
                    [event] = await send(client, call("math.add", {"a": 1, "b": 2}))
            assert event.task.status.state == pb.TASK_STATE_COMPLETED
            assert data(event.task.artifacts[0].parts[0]) == {"sum": 3.0}
        finally:
            await agent.close(drain=0.2)
