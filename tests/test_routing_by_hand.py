"""Changing routing by hand (issue 14, item 11): weight override and pin/unpin of an agent for a
capability, from the Python API and the admin feed, each recorded as an admin event."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from test_admin_feed import TOKEN, Feed

from reach import Context
from reach.errors import InvalidParams, Unavailable
from reach.gateway.events import ADMIN, Event
from reach.testing import Cluster

CAP = "x.echo"


@pytest.fixture
async def cluster() -> Any:
    c = await Cluster.start(admin_token=TOKEN, max_retries=0)
    for name in ("left", "right"):
        async def echo(ctx: Context, name: str = name) -> str:
            return name
        await c.add_agent(name, {CAP: echo, "x.other": echo}, weight=50)
    yield c
    await c.close()


async def spread(cluster: Cluster, n: int = 40) -> Counter[str]:
    client = cluster.clients[0] if cluster.clients else await cluster.client("planner")
    return Counter([await client.call(CAP, {}) for _ in range(n)])


async def test_pin_unpin_and_weights_from_python_each_an_admin_event(cluster: Cluster) -> None:
    reach = cluster.reach
    events: list[Event] = []
    stop = reach.gateway.events.listen(events.append)
    assert set(await spread(cluster)) == {"left", "right"}

    assert reach.pin("right", "X.Echo") == {"weights": [], "pins": {CAP: ["right"]}}
    assert await spread(cluster) == {"right": 40}
    assert set(await spread_other(cluster)) == {"left", "right"}  # only x.echo is pinned

    view = reach.set_weight("left", 1000.0)
    assert view["weights"] == [{"agent": "left", "capability": None, "weight": 1000.0}]
    assert await spread(cluster) == {"right": 40}  # a pin beats any weight
    assert reach.unpin(CAP) == {"weights": view["weights"], "pins": {}}
    assert await spread(cluster) == {"left": 40}  # unpinned: the heavier weight wins
    assert reach.set_weight("left", None)["weights"] == []
    assert set(await spread(cluster)) == {"left", "right"}  # declared again: equal, spread
    assert reach.overrides() == {"weights": [], "pins": {}}

    with pytest.raises(InvalidParams, match="agent 'left' does not serve 'nope.run'; it serves "
                                            "x.echo, x.other"):
        reach.pin("left", "nope.run")
    with pytest.raises(InvalidParams, match="no agent named 'ghost'"):
        reach.set_weight("ghost", 3.0)
    with pytest.raises(InvalidParams, match=r"weight must be in \(0, 1000\]"):
        reach.set_weight("left", 0.0)
    with pytest.raises(InvalidParams, match="'x.echo' is not pinned"):
        reach.unpin(CAP)
    stop()
    actions = [(e.data["action"], e.data["ok"]) for e in events if e.kind == ADMIN]
    assert actions == [("pin", True), ("set_weight", True), ("unpin", True),
                       ("set_weight", True), ("pin", False), ("set_weight", False),
                       ("set_weight", False), ("unpin", False)]


async def spread_other(cluster: Cluster, n: int = 40) -> Counter[str]:
    client = cluster.clients[0]
    return Counter([await client.call("x.other", {}) for _ in range(n)])


async def test_a_pinned_agent_that_goes_away_makes_the_capability_unavailable_not_rerouted(
        cluster: Cluster) -> None:
    reach = cluster.reach
    reach.pin("left", CAP)
    reach.drain("left")
    client = await cluster.client("planner")
    with pytest.raises(Unavailable) as err:
        await client.call(CAP, {})
    assert "pinned to left by an operator" in err.value.message, err.value.message
    reach.unpin(CAP, "left")
    assert await client.call(CAP, {}) == "right"


async def test_the_admin_feed_commands(cluster: Cluster) -> None:
    feed, _ = await Feed.open(cluster.url)
    reply = await feed.command("pin", agent="left", capability=CAP)
    assert reply["ok"] and reply["result"]["pins"] == {CAP: ["left"]}
    assert await spread(cluster) == {"left": 40}
    reply = await feed.command("set_weight", agent="right", capability=CAP, weight=5)
    assert reply["ok"] and reply["result"]["weights"] == [
        {"agent": "right", "capability": CAP, "weight": 5.0}]
    reply = await feed.command("unpin", capability=CAP, agent="left")
    assert reply["ok"] and reply["result"]["pins"] == {}
    reply = await feed.command("set_weight", agent="right", weight=None, capability=CAP)
    assert reply["ok"] and reply["result"]["weights"] == []
    for args in ({"agent": "right", "weight": "heavy"}, {"agent": "right", "weight": True}):
        bad = await feed.command("set_weight", **args)
        assert not bad["ok"] and bad["error"]["code"] == "invalid_params"
        assert "weight must be a number or null" in bad["error"]["message"]
    bad = await feed.command("pin", agent="left")
    assert not bad["ok"] and "missing argument 'capability'" in bad["error"]["message"]
    await feed.ws.close()
