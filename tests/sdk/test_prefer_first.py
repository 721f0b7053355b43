"""``Agent.connect([...], prefer="first")`` (issue 29 item 5): an agent given ``[url_b, url_a]``
landed on a random one of them, so placing agents on chosen nodes took a loop of reconnects.
With ``prefer="first"`` it registers with the first that answers and, when that one goes, moves
on down the list; ``"random"`` stays the agents' default, ``Client`` takes the same word."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reach import Agent, Client, Reach
from reach.testing import wait_until

FAST = {"heartbeat_interval": 0.05, "recovery_grace": 0.5, "drain_timeout": 0.2}


@pytest.fixture
async def trio() -> AsyncIterator[tuple[Reach, Reach, Reach]]:
    nodes = [await Reach.start(**FAST) for _ in range(3)]
    try:
        yield nodes[0], nodes[1], nodes[2]
    finally:
        for node in nodes:
            await node.stop()


def echo_agent(name: str) -> Agent:
    agent = Agent(name, reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("echo.run", idempotent=True)
    async def run(x: int) -> dict[str, Any]:
        return {"x": x}

    return agent


def online_at(reach: Reach, name: str) -> bool:
    return any(a["name"] == name and a["state"] == "online" for a in reach.agents())


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"ws://127.0.0.1:{s.getsockname()[1]}"


async def test_agents_given_a_list_with_prefer_first_all_land_on_its_first_entry(
        trio: tuple[Reach, Reach, Reach]) -> None:
    a, b, c = trio
    agents = [echo_agent(f"w{i}") for i in range(8)]  # 8 random starts on 3 miss c ~all the time
    try:
        for agent in agents:
            await agent.connect([c.url, a.url, b.url], prefer="first")
        assert {agent.url for agent in agents} == {c.url}
        assert all(online_at(c, agent.name) for agent in agents)
    finally:
        for agent in agents:
            await agent.close()


async def test_prefer_first_skips_a_dead_first_and_moves_on_in_list_order(
        trio: tuple[Reach, Reach, Reach]) -> None:
    a, b, c = trio
    agent = echo_agent("placed")
    try:
        await agent.connect([dead_url(), b.url, c.url, a.url], prefer="first")
        assert agent.url == b.url  # the first that answers
        await b.stop()  # its coordinator goes: the next in the list, not a random one
        # c registers the agent before the agent has read c's welcome (and set its url).
        await wait_until(lambda: online_at(c, "placed") and agent.url == c.url, timeout=5)
        assert not online_at(a, "placed")
    finally:
        await agent.close()


async def test_an_unknown_prefer_is_refused_at_once() -> None:
    agent = echo_agent("w")
    with pytest.raises(ValueError, match=r"prefer='nearest': use \"random\" .* or \"first\""):
        agent.connect(["ws://127.0.0.1:1"], prefer="nearest")
    with pytest.raises(ValueError, match="prefer='any'"):
        Client(["ws://127.0.0.1:1"], prefer="any")


async def test_a_client_with_prefer_random_spreads_and_by_default_takes_the_first(
        trio: tuple[Reach, Reach, Reach]) -> None:
    urls = [node.url for node in trio]
    seen: set[str] = set()
    for _ in range(3):
        async with Client.connect(urls) as client:
            seen.add(client.url)
    assert seen == {urls[0]}
    for _ in range(24):  # 24 random starts on 3 all missing one: (2/3)**24, about 6e-5
        async with Client.connect(urls, prefer="random") as client:
            seen.add(client.url)
        if len(seen) == 3:
            break
    assert seen == set(urls)
