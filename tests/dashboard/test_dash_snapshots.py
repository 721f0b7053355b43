"""How each tab looks, pinned as SVG snapshots (pytest-textual-snapshot).

The app runs on the fixed sample state (dashboard.sample: fixed clock, ids and names) through
a scripted feed at 120x36, so the pictures change only when the dashboard's looks do. After a
deliberate change: run with --snapshot-update, read the diff in the SVGs, then commit them.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from dashboard.screenshots import SIZE, sample_app
from dashboard.views.filter_box import FilterBox
from dashboard.views.traces import TracesView
from reach.testing import wait_until


async def loaded(pilot: Pilot[Any]) -> None:
    """Wait for the sample snapshot (and, on the Traces tab, the selected trace's hops)."""
    app: Any = pilot.app
    await wait_until(lambda: app.model.frames == 1)
    await pilot.pause()


async def waterfall_drawn(pilot: Pilot[Any]) -> None:
    await loaded(pilot)
    await pilot.press("2")
    waterfall = pilot.app.query_one(TracesView).waterfall
    await wait_until(lambda: waterfall.timeline is not None)
    await pilot.pause()


def test_agents_tab(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=loaded)


def test_traces_tab_with_a_waterfall(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=waterfall_drawn)


def test_breakers_tab(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=["3"], terminal_size=SIZE, run_before=loaded)


def test_dead_letters_tab_with_the_detail_pane(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=["4", "down"], terminal_size=SIZE,
                        run_before=loaded)


async def steady_cursor(pilot: Pilot[Any]) -> None:
    await loaded(pilot)
    pilot.app.query_one(FilterBox).cursor_blink = False  # a blink must not flip the picture


def test_filtered_agents(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=["slash", *"orders"], terminal_size=SIZE,
                        run_before=steady_cursor)


def test_help(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=["question_mark"], terminal_size=SIZE,
                        run_before=loaded)


def test_capabilities_tab(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=["5"], terminal_size=SIZE, run_before=loaded)


async def steady_goto(pilot: Pilot[Any]) -> None:
    await loaded(pilot)
    await pilot.press("g")
    await pilot.pause()
    for box in pilot.app.screen.query(Input):
        box.cursor_blink = False


def test_go_to_prompt(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), press=list("a1a1a1"), terminal_size=SIZE,
                        run_before=steady_goto)


async def phrases_read(pilot: Pilot[Any]) -> None:
    await loaded(pilot)
    await pilot.press("6")
    app: Any = pilot.app
    await wait_until(lambda: app.model.phrases is not None)
    await pilot.pause()


def test_phrases_tab(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=phrases_read)


async def pushes_read(pilot: Pilot[Any]) -> None:
    await loaded(pilot)
    await pilot.press("7")
    app: Any = pilot.app
    await wait_until(lambda: app.model.pushes is not None)
    await pilot.pause()


def test_pushes_tab(snap_compare: Any) -> None:
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=pushes_read)
