"""Changing routing by hand from the dashboard (issue 14, item 11): `w` sets the selected
agent's weight and `p` pins a capability to it, against a real coordinator; the Agents tab
shows what an operator set, and each change is the coordinator's own (reach.overrides())."""

from __future__ import annotations

from test_dash_cluster import SIZE, agent_id, cell, cluster, dash
from textual.pilot import Pilot
from textual.widgets import Input

from dashboard.views.status import StatusLine
from reach.testing import Cluster, wait_until

__all__ = ["cluster"]  # the fixture, used by name


async def ask(pilot: Pilot[None], key: str, answer: str) -> None:
    """Press ``key``, then type ``answer`` into the prompt it opens and press enter.

    The answer is put in the prompt's input at once: the pilot waits up to 2 s for the
    process to go idle after every key, and with a coordinator's heartbeats and feed in the
    same process, forty typed characters could pass the test's 60 s timeout on a loaded run."""
    await pilot.press(key)
    await wait_until(lambda: isinstance(pilot.app.focused, Input))
    prompt = pilot.app.focused
    assert isinstance(prompt, Input)
    prompt.value = answer
    await pilot.press("enter")


async def test_w_sets_a_weight_and_p_pins_then_unpins(cluster: Cluster) -> None:
    async def echo() -> str:
        return "ok"

    await cluster.add_agent("ledger-writer", {"ledger.write": echo, "ledger.read": echo})
    ledger = agent_id(cluster.reach, "ledger-writer")
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: ledger in app.model.agents)
        await ask(pilot, "w", "250")
        await wait_until(lambda: cluster.reach.overrides()["weights"] == [
            {"agent": "ledger-writer", "capability": None, "weight": 250.0}])
        await wait_until(lambda: "weight 250" in cell(app, "agents", ledger, "state"))

        await ask(pilot, "p", "ledger.write")
        await wait_until(lambda: cluster.reach.overrides()["pins"] == {
            "ledger.write": ["ledger-writer"]})
        await wait_until(lambda: cell(app, "agents", ledger, "state")
                         == "online · pinned ledger.write · weight 250")

        await ask(pilot, "p", "-ledger.write")
        await wait_until(lambda: cluster.reach.overrides()["pins"] == {})
        await ask(pilot, "w", "")  # empty: back to the declared weight
        await wait_until(lambda: cluster.reach.overrides()["weights"] == [])
        await wait_until(lambda: cell(app, "agents", ledger, "state") == "online")

        await ask(pilot, "w", "heavy")  # not a number: refused here, nothing sent
        await ask(pilot, "w", "5000")  # out of range: the coordinator refuses
        status = app.query_one(StatusLine)
        await wait_until(lambda: "set_weight ledger-writer failed" in status.note)
        assert cluster.reach.overrides() == {"weights": [], "pins": {}}
        await pilot.press("w", "escape")  # esc asks nothing
        assert cluster.reach.overrides() == {"weights": [], "pins": {}}
