"""What every tab has: a caption line, a :class:`LiveTable` and a `/` filter.

The app hands each view the model after every frame (:meth:`TableView.show`); the view picks
its rows, filters them and syncs its table. A view never talks to the feed: it posts messages
and the app runs the commands.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from ..filtering import Filter
from ..model import Model
from ..rows import Column, Row, plural
from .table import LiveTable


class TableView(Vertical):
    """One tab's table of feed objects."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()
    NOUN: ClassVar[str] = "row"

    filter_text: reactive[str] = reactive("")
    """The `/` filter of this tab; each tab keeps its own."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = Model()
        self.shown: list[Row] = []

    def compose(self) -> ComposeResult:
        yield Static(id="caption", classes="caption")
        yield LiveTable(self.COLUMNS, classes="live")

    @property
    def table(self) -> LiveTable:
        return self.query_one(LiveTable)

    def rows(self) -> list[Row]:
        """Every row of this tab for the current model, before filtering."""
        raise NotImplementedError

    # ------------------------------------------------------------ updates from the app

    def show(self, model: Model) -> None:
        """Bring the table up to date with ``model``."""
        self.model = model
        self.resync()

    def watch_filter_text(self) -> None:
        self.resync()

    def resync(self) -> None:
        # Mounted is not enough: while the view composes, or while the app shuts down, its
        # table may not be there, and a feed frame can arrive in either moment (seen in CI).
        if not self.is_mounted or not list(self.query(LiveTable)):
            return
        rows = self.rows()
        wanted = Filter.parse(self.filter_text)
        self.shown = [row for row in rows if wanted.matches(row.fields)]
        self.table.sync(self.shown)
        self.query_one("#caption", Static).update(self.caption(len(rows), wanted))
        self.selection_changed(self.table.selected_key)

    def caption(self, total: int, wanted: Filter) -> str:
        if wanted:
            return f"{len(self.shown)} of {plural(total, self.NOUN)} match “{wanted.text}”"
        return plural(total, self.NOUN)

    @property
    def selected_key(self) -> str | None:
        return self.table.selected_key

    # ------------------------------------------------------------ selection

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.selection_changed(event.row_key.value)

    def selection_changed(self, key: str | None) -> None:
        """The row under the cursor may be another one (or changed): views with a detail
        pane follow it here."""
