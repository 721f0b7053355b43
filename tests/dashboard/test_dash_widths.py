"""Columns size to their content and the terminal (issue 14, item 7, and item 5's table).

Names are shown whole when they fit (``ledger-writer`` was cut to ``ledger-write`` at any
width); when the terminal is too narrow, only names, capabilities and errors give way, and
what is cut ends in "…".
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from dashboard import ReachDashboard, sample
from dashboard.views.base import TableView
from dashboard.widths import cut, fit
from reach.demo import Board, render
from reach.testing import wait_until

LONG = "orders-writer-for-the-eu-west-region-primary"  # 44 characters


def test_fit_keeps_every_width_when_the_table_fits() -> None:
    assert fit([13, 6, 30], [12, None, 10], 49) == [13, 6, 30]


def test_fit_caps_the_widest_shrinkable_columns_first() -> None:
    # 10 over: the 30-wide column gives way, the 13-wide name stays whole.
    assert fit([13, 6, 30], [12, None, 10], 39) == [13, 6, 20]
    # Deeper: both shrink to one level, never below their floor; fixed ones never move.
    assert fit([20, 6, 30], [8, None, 10], 30) == [12, 6, 12]
    assert fit([20, 6, 30], [8, None, 10], 10) == [8, 6, 10]  # the floor: the table scrolls


def test_fit_hands_out_the_rounding() -> None:
    widths = fit([20, 20, 5], [4, 4, None], 40)
    assert sum(widths) == 40 and sorted(widths[:2]) == [17, 18]


def test_fit_without_shrinkable_columns_leaves_them() -> None:
    assert fit([10, 10], [None, 12], 5) == [10, 10]  # 12 ≥ its natural width: never cut


def test_cut_marks_what_it_cut() -> None:
    assert cut(Text("ledger-writer"), 13).plain == "ledger-writer"
    cut_text = cut(Text("ledger-writer", style="red"), 8)
    assert cut_text.plain == "ledger-…" and cut_text.style == "red"


def long_names() -> sample.ScriptedFeed:
    snap = sample.snapshot()
    snap["agents"][0]["name"] = "ledger-writer"
    snap["agents"][1]["name"] = LONG
    snap["agents"][1]["capabilities"] = ["orders.write", "orders.cancel", "orders.refund"]
    return sample.ScriptedFeed([snap])


def agent_cells(app: ReachDashboard, column: str) -> list[str]:
    table = app.query_one("#agents-view", TableView).table
    return [str(table.get_cell(key, column).plain) for key in table.keys]


@pytest.mark.parametrize("width", [120, 200])
async def test_names_are_whole_when_they_fit_and_marked_when_cut(width: int) -> None:
    app = ReachDashboard(url="ws://x", token="t", connector=sample.connector(long_names()))
    async with app.run_test(size=(width, 40)) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.pause()
        names = agent_cells(app, "agent")
        assert "ledger-writer" in names
        caps = agent_cells(app, "caps")
        table = app.query_one("#agents-view", TableView).table
        assert table.virtual_size.width <= width  # no sideways scrolling
        if width == 200:
            assert LONG in names
            assert "orders.write, orders.cancel, orders.refund" in caps
            assert not any(c.endswith("…") for c in names + caps)
        else:
            (cut_name,) = [n for n in names if n.startswith("orders-writer")]
            assert cut_name.endswith("…") and len(cut_name) >= 12
            assert any(c.endswith("…") for c in caps)
        await pilot.resize_terminal(200 if width == 120 else 120, 40)  # follows the terminal
        await pilot.pause()
        assert (LONG in agent_cells(app, "agent")) == (width == 120)


async def test_dead_letter_errors_use_the_room_there_is() -> None:
    snap = sample.snapshot()
    message = "RuntimeError: " + "the ledger replica refused the write " * 3
    snap["dead_letters"][1]["error"]["message"] = message.strip()
    app = ReachDashboard(url="ws://x", token="t",
                         connector=sample.connector(sample.ScriptedFeed([snap])))
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("4")
        await pilot.pause()
        table = app.query_one("#dead-letters-view", TableView).table
        shown = str(table.get_cell(snap["dead_letters"][1]["task_id"], "error").plain)
        assert shown == "task_failed: " + message.strip()  # 137 characters; was cut at 40


def demo_lines(width: int, detail: str) -> str:
    board = Board()
    board.add("sales.query", "ok", 12.0, detail)

    class Quiet:
        url = "ws://127.0.0.1:1"

        def agents(self) -> list[dict[str, object]]:
            return []

    console = Console(width=width, record=True, file=io.StringIO())
    console.print(render(Quiet(), board, 5.0, Path("x.db")))  # type: ignore[arg-type]
    return console.export_text()


def test_the_demo_shows_the_whole_detail_when_the_terminal_has_room() -> None:
    detail = "a" * 30 + " routed to sales-1 after 2 retries " + "b" * 40  # 105 characters
    assert detail in demo_lines(160, detail)
    narrow = demo_lines(80, detail)
    assert detail not in narrow and "…" in narrow  # cut, and it says so
