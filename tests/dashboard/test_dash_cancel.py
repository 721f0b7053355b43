"""Cancelling from the dashboard (issue 27): on the Traces tab `c` cancels the selected
trace's running tasks once the operator confirms; each is one admin-feed `cancel` command,
and `n` sends nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dashboard import ReachDashboard, sample
from dashboard.screens import ConfirmScreen
from dashboard.views.status import StatusLine
from dashboard.views.traces import TracesView, Waterfall
from reach.testing import wait_until

SIZE = (120, 36)
RUNNING = sample.TRACES[1]["trace_id"]  # billing.charge, still running


@pytest.fixture
async def running() -> AsyncIterator[tuple[ReachDashboard, Any, sample.ScriptedFeed]]:
    feed = sample.ScriptedFeed()

    async def connect(url: str, token: str) -> Any:
        return feed

    app = ReachDashboard(url="ws://test", token="t", connector=connect)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.pause()
        yield app, pilot, feed


def sent(feed: sample.ScriptedFeed, action: str) -> list[dict[str, Any]]:
    return [args for name, args in feed.commands if name == action]


async def on_running_trace(app: ReachDashboard, pilot: Any) -> None:
    await pilot.press("2")
    view = app.query_one(TracesView)
    for _ in range(len(sample.TRACES)):
        if view.selected_key == RUNNING:
            break
        await pilot.press("down")
    await wait_until(lambda: (tl := app.query_one(Waterfall).timeline) is not None
                     and tl.trace_id == RUNNING)


async def test_c_cancels_the_running_tasks_of_the_trace_once_confirmed(running: Any) -> None:
    app, pilot, feed = running
    await on_running_trace(app, pilot)
    await pilot.press("c")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await wait_until(lambda: sent(feed, "cancel") != [])
    assert sent(feed, "cancel") == [{"task_id": "dd" * 16, "reason": "from the dashboard"}]
    status = app.query_one(StatusLine)
    await wait_until(lambda: "cancelled 1 task of trace" in status.note)


async def test_n_cancels_nothing_and_a_finished_trace_has_nothing_to_cancel(
        running: Any) -> None:
    app, pilot, feed = running
    await on_running_trace(app, pilot)
    await pilot.press("c", "n")
    await pilot.pause()
    assert not isinstance(app.screen, ConfirmScreen) and sent(feed, "cancel") == []
    await pilot.press("up")  # the failed report.write trace: nothing of it runs
    await wait_until(lambda: (tl := app.query_one(Waterfall).timeline) is not None
                     and tl.trace_id != RUNNING)
    await pilot.press("c")
    await pilot.pause()
    assert not isinstance(app.screen, ConfirmScreen) and sent(feed, "cancel") == []
