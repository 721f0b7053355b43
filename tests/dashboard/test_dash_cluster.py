"""The dashboard against a real in-memory coordinator: its admin feed, agents and callers over
loopback websockets, millisecond heartbeats and backoffs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dashboard import ReachDashboard
from dashboard.feed import FeedConnection, connect
from dashboard.views.base import TableView
from dashboard.views.status import StatusLine
from dashboard.views.traces import TracesView
from reach import Reach, ReachError
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until

SIZE = (120, 36)


class Switch:
    """A handler that fails while ``failing`` is set: a fault, so retries and a dead letter."""

    def __init__(self) -> None:
        self.failing = True
        self.calls = 0

    async def run(self) -> str:
        self.calls += 1
        if self.failing:
            raise RuntimeError("boom")
        return "fixed"


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    # Suspected after 1 s of silence, offline after 2 (Cluster's default is 200/300 ms):
    # liveness is not these tests' subject, and a Textual app starting in the same loop
    # stalled it past 150 ms now and then, so the agent under test went offline mid-test.
    c = await Cluster.start(admin_token="t", backoff=Backoff(base=0.005, jitter=0.0),
                            suspect_after=20, offline_after=40)
    yield c
    await c.close()


def dash(url: str, token: str = "t", connector: Any = connect) -> ReachDashboard:
    return ReachDashboard(url=url, token=token, connector=connector, reconnect_base=0.02,
                          reconnect_cap=0.1)


def table_view(app: ReachDashboard, tab: str) -> TableView:
    return app.query_one(f"#{tab}-view", TableView)


def cell(app: ReachDashboard, tab: str, key: str, column: str) -> str:
    return str(table_view(app, tab).table.get_cell(key, column).plain)


def agent_id(reach: Reach, name: str) -> str:
    return next(str(a["agent_id"]) for a in reach.agents() if a["name"] == name)


async def dead_letter(cluster: Cluster, cap: str, switch: Switch) -> None:
    client = await cluster.client("planner")
    with pytest.raises(ReachError):
        await client.call(cap, {}, max_retries=1)
    await wait_until(lambda: any(d["capability"] == cap for d in cluster.reach.dead_letters()))


async def test_agents_tab_shows_live_state_and_load(cluster: Cluster) -> None:
    release = asyncio.Event()

    async def ok() -> int:
        return 1

    async def hang() -> int:
        await release.wait()
        return 2

    await cluster.add_agent("fast", {"x.ok": ok})
    await cluster.add_agent("slow", {"x.hang": hang}, max_concurrency=4)
    client = await cluster.client("planner")
    assert await client.call("x.ok", {}) == 1
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link.state == "connected")
        slow = agent_id(cluster.reach, "slow")
        await wait_until(lambda: slow in table_view(app, "agents").table.keys)
        assert cell(app, "agents", slow, "state") == "online"
        assert cell(app, "agents", slow, "caps") == "x.hang"
        pending = asyncio.create_task(client.call("x.hang", {}))
        await wait_until(lambda: cell(app, "agents", slow, "load").endswith("1/4"))
        release.set()
        assert await pending == 2
        await wait_until(lambda: cell(app, "agents", slow, "load").endswith("0/4"))
        fast = agent_id(cluster.reach, "fast")
        assert cell(app, "agents", fast, "calls") == "1"
        await cluster.agents[0].close()
        await wait_until(lambda: cell(app, "agents", fast, "state") != "online")
        await pilot.pause()


async def test_traces_tab_draws_the_failing_hops(cluster: Cluster) -> None:
    switch = Switch()
    await cluster.add_agent("flaky", {"x.fail": switch.run}, idempotent=True)
    await dead_letter(cluster, "x.fail", switch)
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        waterfall = app.query_one(TracesView).waterfall
        await wait_until(lambda: waterfall.timeline is not None)
        timeline = waterfall.timeline
        assert timeline is not None
        assert any(h.failed for h in timeline.hops)
        drawn = str(waterfall.render())
        assert "1 retry" in drawn and "1 failed" in drawn


async def test_r_replays_the_selected_letter_and_it_leaves(cluster: Cluster) -> None:
    switch = Switch()
    await cluster.add_agent("flaky", {"x.fail": switch.run}, idempotent=True)
    await dead_letter(cluster, "x.fail", switch)
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        letters = table_view(app, "dead-letters")
        await wait_until(lambda: letters.table.row_count == 1)
        switch.failing = False
        await pilot.press("r")
        status = app.query_one(StatusLine)
        await wait_until(lambda: "1 succeeded" in status.note)
        await wait_until(lambda: letters.table.row_count == 0)
        assert cluster.reach.dead_letters() == []


async def test_capital_r_replays_only_what_the_filter_shows(cluster: Cluster) -> None:
    one, two = Switch(), Switch()
    # One agent each: four faults on one agent would open its breaker.
    await cluster.add_agent("flaky-1", {"x.one": one.run}, idempotent=True)
    await cluster.add_agent("flaky-2", {"x.two": two.run}, idempotent=True)
    await dead_letter(cluster, "x.one", one)
    await dead_letter(cluster, "x.two", two)
    one.failing = two.failing = False
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        letters = table_view(app, "dead-letters")
        await wait_until(lambda: letters.table.row_count == 2)
        await pilot.press("slash", *"cap:x.two", "enter", "R", "y")
        await wait_until(lambda: [d["capability"] for d in cluster.reach.dead_letters()]
                         == ["x.one"])
        status = app.query_one(StatusLine)
        await wait_until(lambda: "1 succeeded" in status.note)
        await pilot.press("slash", "escape")
        await wait_until(lambda: letters.table.row_count == 1)
        await pilot.press("R", "y")  # no filter: one replay_filter command for all
        await wait_until(lambda: cluster.reach.dead_letters() == [])
        await wait_until(lambda: letters.table.row_count == 0)
        assert status.note == "replaying 1 dead letter"


async def test_d_drains_and_b_resets_the_breaker(cluster: Cluster) -> None:
    switch = Switch()
    await cluster.add_agent("flaky", {"x.fail": switch.run}, idempotent=True)
    client = await cluster.client("planner")
    for _ in range(5):
        with pytest.raises(ReachError):
            await client.call("x.fail", {}, max_retries=0)
    flaky = agent_id(cluster.reach, "flaky")
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await wait_until(lambda: flaky in table_view(app, "breakers").table.keys)
        assert cell(app, "breakers", flaky, "breaker") == "open"
        assert cell(app, "breakers", flaky, "probe").startswith("in ")
        assert cell(app, "breakers", flaky, "rate") == "tripped 100% of 5"
        await pilot.press("b")
        await wait_until(lambda: cell(app, "breakers", flaky, "breaker") == "closed")
        assert cluster.reach.agents()[0]["breaker"] == "closed"
        await pilot.press("1", "d")
        await wait_until(lambda: cluster.reach.agents()[0]["draining"])
        await wait_until(lambda: cell(app, "agents", flaky, "state") == "drained")
        await pilot.press("d")
        await wait_until(lambda: not cluster.reach.agents()[0]["draining"])
        await wait_until(lambda: "draining" not in cell(app, "agents", flaky, "state"))


async def test_survives_the_coordinator_going_away(cluster: Cluster) -> None:
    async def ok() -> int:
        return 1

    await cluster.add_agent("steady", {"x.ok": ok})
    port = cluster.reach.port
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link.state == "connected")
        first_frames = app.model.frames
        await cluster.reach.stop()
        await wait_until(lambda: app.link.state == "disconnected")
        assert "disconnected — reconnecting" in app.link.detail
        again = await Reach.start(port=port, admin_token="t", heartbeat_interval=0.05)
        try:
            await wait_until(lambda: app.link.state == "connected")
            assert app.model.frames > first_frames
            # The new coordinator's snapshot replaced the state (the agent reconnects on its
            # own); the table never went blank in between.
            await wait_until(lambda: [a.name for a in app.model.agents.values()]
                             == ["steady"])
            await pilot.pause()
        finally:
            await again.stop()


async def test_a_wrong_token_is_a_clear_message_not_a_retry_loop(cluster: Cluster) -> None:
    attempts = 0

    async def counting(url: str, token: str) -> FeedConnection:
        nonlocal attempts
        attempts += 1
        return await connect(url, token)

    app = dash(cluster.url, token="wrong", connector=counting)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link.state == "refused")
        assert app.link.detail.startswith("admin token refused; use the coordinator's admin")
        assert app.link.detail.count("admin token refused") == 1  # said once, not twice
        await pilot.pause(0.2)
        assert attempts == 1 and app.is_running
