"""The dashboard's keys, tabs and live updates, driven by Pilot on a scripted feed.

The scripted feed (dashboard.sample) serves a fixed snapshot and records the commands the app
sends, so these tests pin behaviour without a coordinator; test_dash_cluster.py repeats the
important ones against a real one.
"""

from __future__ import annotations

import copy
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import TabbedContent

from dashboard import ReachDashboard, sample
from dashboard.feed import AdminRefused, CommandFailed, FeedClosed, FeedConnection
from dashboard.screens import ConfirmScreen, HelpScreen
from dashboard.views.base import TableView
from dashboard.views.status import StatusLine
from dashboard.views.traces import TracesView
from reach.testing import wait_until

SIZE = (120, 36)


class Connector:
    """Hands out scripted feeds (or raises) in order and counts the attempts."""

    def __init__(self, *items: sample.ScriptedFeed | Exception) -> None:
        self.items = list(items)
        self.calls = 0

    async def __call__(self, url: str, token: str) -> FeedConnection:
        self.calls += 1
        if not self.items:
            raise FeedClosed("nothing listening")
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


def dashboard(*items: sample.ScriptedFeed | Exception) -> tuple[ReachDashboard, Connector]:
    connect = Connector(*items)
    return ReachDashboard(url="ws://test", token="t", connector=connect,
                          reconnect_base=0.01, reconnect_cap=0.05), connect


@pytest.fixture
async def running() -> AsyncIterator[tuple[ReachDashboard, Any, sample.ScriptedFeed]]:
    feed = sample.ScriptedFeed()
    app, _ = dashboard(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.pause()
        yield app, pilot, feed


def view(app: ReachDashboard, tab: str) -> TableView:
    return app.query_one(f"#{tab}-view", TableView)


def names(app: ReachDashboard, tab: str) -> list[str]:
    table = view(app, tab).table
    return [table.get_row(key)[0].plain for key in table.keys]


def plain(widget: Any) -> str:
    """What a Static shows, as plain text."""
    console = Console(width=SIZE[0], record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def replays(feed: sample.ScriptedFeed) -> list[tuple[str, str]]:
    return [(action, args["task_id"]) for action, args in feed.commands if action == "replay"]


def agent_commands(feed: sample.ScriptedFeed) -> list[tuple[str, str]]:
    return [(action, args["agent"]) for action, args in feed.commands if "agent" in args]


def delta(**parts: Any) -> dict[str, Any]:
    return {"v": 1, "type": "delta", "at": sample.AT + 1, "agents": [], "traces": [],
            "dead_letters": [], "resolved": [], "metrics": sample.METRICS, "dropped": 0,
            **parts}


# ---------------------------------------------------------------- tabs and help


async def test_number_keys_switch_tabs_and_focus_their_table(running: Any) -> None:
    app, pilot, _ = running
    tabs = app.query_one(TabbedContent)
    for key, tab in [("2", "traces"), ("3", "breakers"), ("4", "dead-letters"),
                     ("1", "agents")]:
        await pilot.press(key)
        assert tabs.active == tab
        assert app.focused is view(app, tab).table
    assert names(app, "agents") == ["billing", "orders-1", "orders-2", "reports", "search"]
    assert app.query_one(StatusLine).link.state == "connected"


async def test_question_mark_shows_the_keys_and_esc_closes_them(running: Any) -> None:
    app, pilot, _ = running
    await pilot.press("question_mark")
    assert isinstance(app.screen, HelpScreen)
    await pilot.press("escape")
    assert not isinstance(app.screen, HelpScreen)


# ---------------------------------------------------------------- filter


async def test_slash_filters_the_current_table_only(running: Any) -> None:
    app, pilot, _ = running
    await pilot.press("slash", *"orders")
    assert names(app, "agents") == ["orders-1", "orders-2"]
    caption = view(app, "agents").query_one("#caption")
    assert "2 of 5 agents match “orders” · 2 nodes" in plain(caption)
    await pilot.press("enter")
    assert app.focused is view(app, "agents").table
    assert names(app, "agents") == ["orders-1", "orders-2"]  # enter keeps the filter
    await pilot.press("3")
    assert len(names(app, "breakers")) == 5  # each tab has its own filter
    await pilot.press("1", "slash")
    assert app.query_one("#filter").value == "orders"
    await pilot.press("escape")
    assert len(names(app, "agents")) == 5 and app.focused is view(app, "agents").table


async def test_field_filter_on_dead_letters(running: Any) -> None:
    app, pilot, _ = running
    await pilot.press("4", "slash", *"error:timeout", "enter")
    assert names(app, "dead-letters") == ["1111111111"]


# ---------------------------------------------------------------- live updates


async def test_deltas_update_rows_in_place_and_keep_the_cursor_row(running: Any) -> None:
    app, pilot, feed = running
    table = view(app, "agents").table
    await pilot.press("down", "down")
    assert table.selected_key == "ag-0000000000000003"  # orders-2
    added: list[Any] = []
    table.clear = lambda *a, **k: pytest.fail("a delta must not rebuild the table")  # type: ignore[method-assign]
    real_add = table.add_row
    table.add_row = lambda *a, **k: added.append(k["key"]) or real_add(*a, **k)  # type: ignore[method-assign]
    before = table.get_row("ag-0000000000000001")[0]
    busier = dict(sample.AGENTS[1], inflight=1)
    newcomer = dict(sample.AGENTS[0], name="alpha", agent_id="ag-new")
    feed.push(delta(agents=[busier, newcomer]))
    await wait_until(lambda: "ag-new" in table.keys)
    await pilot.pause()
    assert added == ["ag-new"]
    assert names(app, "agents")[:3] == ["alpha", "billing", "orders-1"]
    assert table.selected_key == "ag-0000000000000003"  # still orders-2, one row lower
    assert table.get_row("ag-0000000000000002")[2].plain.endswith("1/10")
    assert table.get_row("ag-0000000000000001")[0] is before  # untouched cell kept


async def test_resolved_letters_leave_the_table(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4")
    feed.push(delta(resolved=[sample.DEAD_LETTERS[0]["task_id"]]))
    await wait_until(lambda: len(names(app, "dead-letters")) == 2)
    assert view(app, "dead-letters").selected_key == sample.DEAD_LETTERS[1]["task_id"]
    detail = plain(app.query_one("#letter-detail"))
    assert "orders.write  task 2222" in detail and "RuntimeError: db locked" in detail
    assert '"idempotency_key": "key-34"' in detail


async def test_ages_follow_the_feed_clock(running: Any) -> None:
    app, pilot, feed = running
    table = view(app, "agents").table
    assert table.get_row("ag-0000000000000005")[7].plain == "1m35s"
    feed.push(delta(at=sample.AT + 60))
    await wait_until(lambda: table.get_row("ag-0000000000000005")[7].plain == "2m35s")


# ---------------------------------------------------------------- traces


async def test_the_selected_trace_is_fetched_and_drawn(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("2")
    first = sample.TRACES[0]["trace_id"]
    await wait_until(lambda: ("trace", {"trace_id": first}) in feed.commands)
    waterfall = app.query_one(TracesView).waterfall
    await wait_until(lambda: waterfall.timeline is not None)
    assert "orders.write processing #2" in str(waterfall.render())
    await pilot.press("down")
    second = sample.TRACES[1]["trace_id"]
    await wait_until(lambda: ("trace", {"trace_id": second}) in feed.commands)


# ---------------------------------------------------------------- commands


async def test_r_replays_the_selected_letter(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "down", "r")
    task_id = sample.DEAD_LETTERS[1]["task_id"]
    await wait_until(lambda: any(c[0] == "replay" for c in feed.commands))
    assert feed.commands[-1] == ("replay", {"task_id": task_id, "wait": 30.0})
    status = app.query_one(StatusLine)
    await wait_until(lambda: "replayed letter 2222222222: 1 succeeded" in status.note)


async def test_capital_r_replays_what_the_filter_shows_after_confirming(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "slash", *"orders", "enter", "R")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_until(lambda: replays(feed) != [])
    assert replays(feed) == [("replay", sample.DEAD_LETTERS[1]["task_id"])]


async def test_tab_keys_wait_while_a_question_is_open(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "R")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("2", "slash", "question_mark")
    assert isinstance(app.screen, ConfirmScreen)
    assert app.query_one(TabbedContent).active == "dead-letters"
    await pilot.press("escape")
    assert not isinstance(app.screen, ConfirmScreen) and replays(feed) == []


async def test_capital_r_without_a_filter_uses_replay_filter(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "R", "n")
    assert replays(feed) == []
    await pilot.press("R", "y")
    await wait_until(lambda: ("replay_filter", {}) in feed.commands)
    status = app.query_one(StatusLine)
    await wait_until(lambda: status.note == "replaying 3 dead letters")


async def test_bulk_replay_counts_each_outcome() -> None:
    refused = sample.DEAD_LETTERS[0]["task_id"]

    def reply(action: str, args: dict[str, Any]) -> Any:
        if action == "replay" and args["task_id"] == refused:
            raise CommandFailed("invalid_params", "not an unresolved dead letter")
        if action == "replay":
            return {"task_id": args["task_id"], "state": "dead"}
        return sample.sample_reply(action, args)

    app, _ = dashboard(sample.ScriptedFeed(reply=reply))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("4", "slash", *"o", "enter", "R", "y")  # "o" matches all three
        status = app.query_one(StatusLine)
        await wait_until(lambda: status.note.startswith("replayed 3 letters"))
        assert status.note == "replayed 3 letters: 2 dead, 1 refused (invalid_params)"


async def test_a_failed_command_is_reported_not_raised() -> None:
    def refuse(action: str, args: dict[str, Any]) -> Any:
        raise CommandFailed("not_found", "no such dead letter")

    feed = sample.ScriptedFeed(reply=refuse)
    app, _ = dashboard(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("4", "r")
        status = app.query_one(StatusLine)
        await wait_until(lambda: "not_found: no such dead letter" in status.note)
        assert app.is_running


@pytest.mark.parametrize("tab", ["1", "3"])
async def test_d_drains_and_undrains_b_resets_the_breaker(running: Any, tab: str) -> None:
    app, pilot, feed = running
    await pilot.press(tab, "down", "down", "d", "b")  # orders-2
    await wait_until(lambda: len(agent_commands(feed)) == 2)
    assert agent_commands(feed) == [("drain", "orders-2"), ("reset_breaker", "orders-2")]
    await pilot.press("down", "d")  # reports is draining
    await wait_until(lambda: ("undrain", "reports") in agent_commands(feed))
    status = app.query_one(StatusLine)
    await wait_until(lambda: status.note == "undrained reports")


async def test_a_returned_agent_view_shows_before_the_next_delta() -> None:
    def reply(action: str, args: dict[str, Any]) -> Any:
        view = sample.sample_reply(action, args)
        return dict(view, draining=True) if action == "drain" else view

    app, _ = dashboard(sample.ScriptedFeed(reply=reply))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("d")  # billing
        table = view(app, "agents").table
        await wait_until(lambda: table.get_row("ag-0000000000000001")[1].plain
                         == "drained")
        assert app.model.at == sample.AT and app.model.totals() is not None


async def test_a_timeline_off_the_contract_is_shown_as_such() -> None:
    def reply(action: str, args: dict[str, Any]) -> Any:
        return {"hops": "none"} if action == "trace" else sample.sample_reply(action, args)

    app, _ = dashboard(sample.ScriptedFeed(reply=reply))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        waterfall = app.query_one(TracesView).waterfall
        await wait_until(lambda: "not a timeline" in waterfall.message)
        assert waterfall.timeline is None and app.is_running


# ---------------------------------------------------------------- connection


async def test_reconnects_with_backoff_and_rereads_the_snapshot() -> None:
    first, second = sample.ScriptedFeed(), sample.ScriptedFeed()
    app, connect = dashboard(first, FeedClosed("refused"), second)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link.state == "connected")
        await pilot.press("down", "down")
        first.drop()
        await wait_until(lambda: app.link.state == "disconnected")
        assert "disconnected — reconnecting" in app.link.detail
        await wait_until(lambda: app.link.state == "connected")
        assert connect.calls == 3 and app.model.frames == 2
        assert view(app, "agents").table.selected_key == "ag-0000000000000003"


async def test_a_frame_off_the_contract_reconnects_instead_of_crashing() -> None:
    first, second = sample.ScriptedFeed(), sample.ScriptedFeed()
    app, connect = dashboard(first, second)
    async with app.run_test(size=SIZE):
        await wait_until(lambda: app.model.frames == 1)
        first.push(delta(agents=[{"name": "no id"}]))
        await wait_until(lambda: connect.calls == 2 and app.link.state == "connected")
        assert app.is_running and app.model.frames == 2


async def test_a_refused_token_is_shown_and_not_retried() -> None:
    app, connect = dashboard(AdminRefused("bad token"), sample.ScriptedFeed())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.link.state == "refused")
        await pilot.pause(0.1)
        assert connect.calls == 1
        assert app.link.detail == "admin token refused: bad token"
        assert "admin token refused: bad token" in plain(app.query_one(StatusLine))


async def test_a_snapshot_after_dropped_events_replaces_the_state(running: Any) -> None:
    app, pilot, feed = running
    fresh = sample.snapshot()
    fresh["agents"] = copy.deepcopy(fresh["agents"][:2])
    feed.push(delta(dropped=5))
    feed.push(fresh)
    await wait_until(lambda: len(names(app, "agents")) == 2)
    assert names(app, "breakers") == ["billing", "orders-1"]
