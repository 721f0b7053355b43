"""`g` goes to a task or trace by id, and the Capabilities tab (issue 14, item 9), on the
scripted feed; test_dash_restart.py shows the coordinator's side (``find``) on a real store."""

from __future__ import annotations

from typing import Any

from dashboard import ReachDashboard, sample
from dashboard.feed import CommandFailed
from dashboard.model import TRACE_LIMIT
from dashboard.screens import GotoScreen
from dashboard.views.base import TableView
from dashboard.views.status import StatusLine
from dashboard.views.traces import TracesView
from reach.testing import wait_until

SIZE = (120, 36)
OLD = "0f" * 16
"""A trace the snapshot does not list (older than the newest 200): only ``find`` knows it."""


def reply(action: str, args: dict[str, Any]) -> Any:
    if action == "find" and OLD.startswith(str(args["id"])):
        summary = {"trace_id": OLD, "root": "ledger.append", "caller": "batch", "tasks": 1,
                   "started_at": sample.AT - 86400.0, "ended_at": sample.AT - 86399.9,
                   "duration_ms": 100.0, "state": "succeeded"}
        timeline = {"trace_id": OLD, "started_at": sample.AT - 86400.0, "duration_ms": 100.0,
                    "tasks": [], "hops": [
                        {"task_id": "t" * 32, "capability": "ledger.append", "phase": "queued",
                         "start": sample.AT - 86400.0, "end": sample.AT - 86399.9}]}
        return {"trace_id": OLD, "task_id": "t" * 32, "dead_letter": False,
                "summary": summary, "timeline": timeline}
    return sample.sample_reply(action, args)


def app_on(feed: sample.ScriptedFeed) -> ReachDashboard:
    return ReachDashboard(url="ws://test", token="t", connector=sample.connector(feed))


async def test_g_goes_to_an_old_trace_by_a_head_of_its_id() -> None:
    snap = sample.snapshot()
    snap["traces"] = [{**sample.TRACES[0], "trace_id": f"{n:032x}",
                       "started_at": sample.AT - n} for n in range(1, TRACE_LIMIT + 1)]
    feed = sample.ScriptedFeed([snap], reply=reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("g")
        assert isinstance(app.screen, GotoScreen)
        await pilot.press("1")  # typed into the box: not the Agents key
        assert isinstance(app.screen, GotoScreen)
        await pilot.press("backspace", *OLD[:8], "enter")
        traces = app.query_one(TracesView)
        await wait_until(lambda: traces.table.selected_key == OLD)
        assert ("find", {"id": OLD[:8]}) in feed.commands
        assert app.query_one("TabbedContent").active == "traces"  # type: ignore[attr-defined]
        assert traces.waterfall.timeline is not None
        status = app.query_one(StatusLine)
        assert "ledger.append, succeeded" in status.note
        # Kept while newer traces arrive (the list holds the newest 200 and those gone to).
        feed.push({"v": 1, "type": "delta", "at": sample.AT + 1, "traces": [
            {**sample.TRACES[0], "trace_id": "ab" * 16, "started_at": sample.AT + 1}]})
        await wait_until(lambda: "ab" * 16 in app.model.traces)
        assert OLD in app.model.traces and len(app.model.traces) == TRACE_LIMIT + 1
        assert f"{1:032x}" in app.model.traces and f"{TRACE_LIMIT:032x}" not in app.model.traces


async def test_g_on_a_dead_letter_opens_it_on_its_tab() -> None:
    feed = sample.ScriptedFeed()
    app = app_on(feed)
    letter = sample.DEAD_LETTERS[1]["task_id"]
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("g", *letter[:10], "enter")
        letters = app.query_one("#dead-letters-view", TableView)
        await wait_until(lambda: letters.table.selected_key == letter)
        assert app.query_one("TabbedContent").active == "dead-letters"  # type: ignore[attr-defined]


async def test_g_says_what_it_could_not_find_and_esc_cancels() -> None:
    def refuse(action: str, args: dict[str, Any]) -> Any:
        if action == "find":
            raise CommandFailed("invalid_params", "no task or trace id starts with 'beef00'")
        return sample.sample_reply(action, args)

    feed = sample.ScriptedFeed(reply=refuse)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("g", "escape")
        assert not isinstance(app.screen, GotoScreen)
        assert not [c for c in feed.commands if c[0] == "find"]
        await pilot.press("g", *"beef00", "enter")
        status = app.query_one(StatusLine)
        await wait_until(lambda: "no task or trace id starts with" in status.note)
        assert status.note.startswith("go to beef00: ")


async def test_the_capabilities_tab_joins_metrics_agents_and_breakers() -> None:
    app = app_on(sample.ScriptedFeed())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("5")
        view = app.query_one("#capabilities-view", TableView)
        await wait_until(lambda: view.table.row_count > 0)

        def cells(cap: str) -> dict[str, str]:
            return {c.key: str(view.table.get_cell(cap, c.key).plain) for c in view.COLUMNS}

        orders = cells("orders.write")
        assert orders["agents"] == "orders-1, orders-2"  # whole, at 120 columns
        assert orders["online"] == "1/2" and orders["breakers"] == "1 closed · 1 open"
        assert (orders["calls"], orders["faults"]) == ("1635", "10")
        assert (orders["p50"], orders["p95"], orders["p99"]) == ("21 ms", "84 ms", "189 ms")
        # the backlog rides on "In flight": 0 running, 14 tasks waiting their turn
        assert cells("report.write")["inflight"] == "0 +14"
        style = view.table.get_cell("report.write", "inflight").spans[0].style
        assert style == "red"  # the oldest has waited 95 s, past a minute
        assert cells("data.search")["online"] == "0/1"  # declared, never called
        assert cells("data.search")["calls"] == "0" and cells("data.search")["p95"] == "—"
        assert "capabilities" in str(view.query_one("#caption").render())
        await pilot.press("slash", *"breaker:half", "enter")
        assert view.table.keys == ["report.write"]
