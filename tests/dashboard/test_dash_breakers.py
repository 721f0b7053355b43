"""Breakers and dead letters tell the whole story (issue 14, item 8), on a real coordinator.

An open breaker past its wait says it probes on the next call (not a stuck "in 0.0s"), shows
the rate that tripped it and when it opened, also after a failed probe emptied its window;
a letter replayed into an open breaker keeps the error it first died with.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import pytest
from rich.console import Console
from test_dash_cluster import SIZE, agent_id, cell, dash, table_view
from textual.widgets import Static

from reach import ReachError
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = await Cluster.start(admin_token="t", backoff=Backoff(base=0.005, jitter=0.0),
                            breaker_open_for=0.05)
    yield c
    await c.close()


async def broken() -> int:
    raise RuntimeError("ledger disk full")


async def trip(cluster: Cluster, cap: str = "ledger.append") -> None:
    """Five faults: the agent's breaker opens, five letters are dead."""
    client = await cluster.client("planner")
    for _ in range(5):
        with pytest.raises(ReachError):
            await client.call(cap, {}, max_retries=0)
    await wait_until(lambda: len(cluster.reach.dead_letters()) == 5)


async def test_an_open_breaker_waits_for_a_call_and_says_what_tripped_it(cluster: Cluster
                                                                         ) -> None:
    await cluster.add_agent("ledger-writer", {"ledger.append": broken})
    await trip(cluster)
    ledger = agent_id(cluster.reach, "ledger-writer")
    app = dash(cluster.url)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await wait_until(lambda: ledger in table_view(app, "breakers").table.keys)
        assert cell(app, "breakers", ledger, "agent") == "ledger-writer"  # not "ledger-write"
        assert cell(app, "breakers", ledger, "breaker") == "open"
        # 50 ms later the wait is over; no call came, so no probe went.
        await wait_until(lambda: cell(app, "breakers", ledger, "probe")
                         .startswith("next call · ready "))
        assert cell(app, "breakers", ledger, "rate") == "tripped 100% of 5"
        assert cell(app, "breakers", ledger, "opened") not in ("", "—")
        # The probe fails: the window is emptied, the reason stays.
        with pytest.raises(ReachError):
            await (await cluster.client("again")).call("ledger.append", {}, max_retries=0)
        await wait_until(lambda: cell(app, "breakers", ledger, "rate")
                         == "tripped 100% of 5 · probe failed")  # whole, at 120 columns
        assert cluster.reach.agents()[0]["breaker_detail"]["window"] == 0
        await pilot.pause()


async def test_a_letter_replayed_into_an_open_breaker_keeps_its_first_error(
        cluster: Cluster) -> None:
    await cluster.add_agent("ledger-writer", {"ledger.append": broken})
    await trip(cluster)
    first = cluster.reach.dead_letters()[0]
    assert "ledger disk full" in first["error"]["message"]
    # Hold the breaker open: the probe fails, and the agent rests before the next one.
    cluster.reach.registry.by_name["ledger-writer"].breaker.open_for = 60.0
    await cluster.reach.replay(first["task_id"], wait=5)  # the last-resort probe: a fault
    again = await cluster.reach.replay(first["task_id"], wait=5)  # no agent may be tried
    assert again["state"] == "dead" and again["error"]["code"] == "unavailable"
    letter = cluster.reach.dead_letter(first["task_id"])
    assert letter is not None and letter["error"]["code"] == "unavailable"
    earlier = [e["error"] for e in letter["earlier_errors"]]
    assert len(earlier) == 2 and all("ledger disk full" in e for e in earlier)
    app = dash(cluster.url)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("4")
        letters = table_view(app, "dead-letters")
        await wait_until(lambda: first["task_id"] in letters.table.keys)
        shown = cell(app, "dead-letters", first["task_id"], "error")
        assert shown.startswith("unavailable: ") and "· was task_failed" in shown
        letters.table.select(first["task_id"])
        await pilot.pause()
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(app.query_one("#letter-detail", Static).content)
        detail = console.export_text()
        assert detail.count("it had died with task_failed: RuntimeError: ledger disk full") == 2
