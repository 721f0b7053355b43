"""One Reach attaches another's A2A door with ``A2AAgent`` (issue 28): the adapter names the
skill in the message's metadata and sends the params as the data part; the door calls that
capability with them, so the second Reach's capabilities are the first's skills."""

from __future__ import annotations

from a2a_door.conftest import FAST, serve

from reach import Agent, Client, Reach
from reach.adapters import A2AAgent


async def test_a_reach_attaches_another_reach_s_a2a_door() -> None:
    async with Reach.start(**FAST, a2a=True) as far:
        assert far.a2a_url is not None
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(far.url)
        try:
            async with Reach.start(**FAST) as near:
                await near.attach(A2AAgent("far", far.a2a_url,
                                           skills={"math.add": {"idempotent": True}}))
                async with Client.connect(near.url) as client:
                    assert await client.call("far.echo.run", {"x": "y"}) == {"echo": {"x": "y"}}
                    assert await client.call("far.math.add", {"a": 2, "b": 3}) == {"sum": 5}
        finally:
            await agent.close(drain=0.2)
