"""Settling dead letters from the dashboard (issue 29, item 2): on the Dead letters tab `d`
asks why and discards the selected letter, `e` replays it with params (and a timeout) the
operator edits first; each is one admin-feed command, and esc sends nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from dashboard import ReachDashboard, sample
from dashboard.screens import AskScreen
from dashboard.views.status import StatusLine
from reach.testing import wait_until

SIZE = (120, 36)


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


async def test_d_discards_the_selected_letter_with_the_reason_given(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "down", "d")
    assert isinstance(app.screen, AskScreen)
    await pilot.press(*"order cancelled", "enter")
    task_id = sample.DEAD_LETTERS[1]["task_id"]
    await wait_until(lambda: sent(feed, "discard") != [])
    assert sent(feed, "discard") == [{"task_id": task_id, "reason": "order cancelled"}]
    status = app.query_one(StatusLine)
    await wait_until(lambda: "discarded letter 2222222222: order cancelled" in status.note)


async def test_esc_discards_nothing(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "d", "escape")
    assert not isinstance(app.screen, AskScreen)
    await pilot.pause()
    assert sent(feed, "discard") == []


async def test_e_replays_with_the_params_edited_and_a_timeout(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "e")
    assert isinstance(app.screen, AskScreen)
    letter = sample.DEAD_LETTERS[0]
    field = app.screen.query_one("#settle")
    assert json.loads(field.value) == letter["envelope"]["params"]  # starts from the letter's
    field.value = '{"region": "west"} timeout=12'
    await pilot.press("enter")
    await wait_until(lambda: sent(feed, "replay") != [])
    assert sent(feed, "replay") == [{"task_id": letter["task_id"], "params": {"region": "west"},
                                     "timeout": 12.0, "wait": 30.0}]


async def test_params_that_are_not_json_are_reported_and_not_sent(running: Any) -> None:
    app, pilot, feed = running
    await pilot.press("4", "e")
    app.screen.query_one("#settle").value = "{not json"
    await pilot.press("enter")
    status = app.query_one(StatusLine)
    await wait_until(lambda: "not sent" in status.note)
    assert sent(feed, "replay") == []
