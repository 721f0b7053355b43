"""Changing routing by hand from the dashboard (issue 14, item 11): `w` sets the selected
agent's weight and `p` pins a capability to it, against a real coordinator; the Agents tab
shows what an operator set, and each change is the coordinator's own (reach.overrides())."""

from __future__ import annotations

from test_dash_cluster import SIZE, agent_id, cell, cluster, dash

from dashboard.views.status import StatusLine
from reach.testing import Cluster, wait_until

__all__ = ["cluster"]  # the fixture, used by name


async def test_w_sets_a_weight_and_p_pins_then_unpins(cluster: Cluster) -> None:
    async def echo() -> str:
        return "ok"

    await cluster.add_agent("ledger-writer", {"ledger.write": echo, "ledger.read": echo})
    ledger = agent_id(cluster.reach, "ledger-writer")
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: ledger in app.model.agents)
        await pilot.press("w", *"250", "enter")
        await wait_until(lambda: cluster.reach.overrides()["weights"] == [
            {"agent": "ledger-writer", "capability": None, "weight": 250.0}])
        await wait_until(lambda: "weight 250" in cell(app, "agents", ledger, "state"))

        await pilot.press("p", *"ledger.write", "enter")
        await wait_until(lambda: cluster.reach.overrides()["pins"] == {
            "ledger.write": ["ledger-writer"]})
        await wait_until(lambda: cell(app, "agents", ledger, "state")
                         == "online · pinned ledger.write · weight 250")

        await pilot.press("p", *"-ledger.write", "enter")
        await wait_until(lambda: cluster.reach.overrides()["pins"] == {})
        await pilot.press("w", "enter")  # empty: back to the declared weight
        await wait_until(lambda: cluster.reach.overrides()["weights"] == [])
        await wait_until(lambda: cell(app, "agents", ledger, "state") == "online")

        await pilot.press("w", *"heavy", "enter")  # not a number: refused here, nothing sent
        await pilot.press("w", *"5000", "enter")  # out of range: the coordinator refuses
        status = app.query_one(StatusLine)
        await wait_until(lambda: "set_weight ledger-writer failed" in status.note)
        assert cluster.reach.overrides() == {"weights": [], "pins": {}}
        await pilot.press("w", "escape")  # esc asks nothing
        assert cluster.reach.overrides() == {"weights": [], "pins": {}}
