"""A DataTable kept in step with a list of rows by key, in place.

Live updates must not flicker or lose the cursor, so :meth:`LiveTable.sync` never clears the
table: it removes rows that went away, adds new ones, rewrites only the cells that changed,
reorders when the order changed, and puts the cursor back on the row it was on.

Columns size to their content and to the table's width (:mod:`dashboard.widths`): the rows
keep their whole cells, and each sync (and each resize) shows them cut to the widths that fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from ..rows import Column, Row
from ..widths import cut, fit


class LiveTable(DataTable[Text]):
    """Row-cursor table whose rows are keyed by feed id (agent, trace or task id)."""

    def __init__(self, columns: Sequence[Column], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.spec = tuple(columns)
        self._cells: dict[str, tuple[Text, ...]] = {}  # as shown (maybe cut)
        self._rows: list[Row] = []  # as given, whole
        self.widths: list[int] = [len(column.label) for column in self.spec]
        """Each column's width in cells, without its padding, as last laid out."""
        for column in self.spec:
            self.add_column(column.label, key=column.key)

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor, or None when the table is empty."""
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key
        except CellDoesNotExist:
            return None
        return key.value

    @property
    def keys(self) -> list[str]:
        """Row keys in display order."""
        return [str(row.key.value) for row in self.ordered_rows]

    def select(self, key: str) -> None:
        """Put the cursor on the row ``key`` (if it is shown)."""
        try:
            index = self.get_row_index(key)
        except RowDoesNotExist:
            return
        if index != self.cursor_row:
            self.move_cursor(row=index, animate=False)

    @property
    def room(self) -> int:
        """The cells' share of the table's width: less each column's padding and the
        vertical scrollbar (kept free, so a scrollbar coming and going moves nothing)."""
        width = self.size.width or self.app.size.width
        return (width - 2 * self.cell_padding * len(self.spec)
                - self.styles.scrollbar_size_vertical)

    def lay_out(self, rows: Sequence[Row]) -> list[int]:
        """The column widths for ``rows`` in the room there is."""
        natural = [Text(column.label).cell_len for column in self.spec]
        for row in rows:
            for index, value in enumerate(row.cells):
                if value.cell_len > natural[index]:
                    natural[index] = value.cell_len
        return fit(natural, [column.shrink for column in self.spec], self.room,
                   [1 if column.name else 0 for column in self.spec])

    def on_resize(self) -> None:
        if self._rows:
            self.sync(self._rows)

    def sync(self, rows: Sequence[Row]) -> None:
        """Make the table show exactly ``rows``, in that order, changing as little as it can."""
        selected = self.selected_key
        self._rows = list(rows)
        self.widths = widths = self.lay_out(rows)
        wanted = {row.key for row in rows}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
        for row in rows:
            shown = tuple(cut(value, width) for value, width in zip(row.cells, widths,
                                                                    strict=True))
            old = self._cells.get(row.key)
            if old is None:
                self.add_row(*shown, key=row.key)
                self._cells[row.key] = shown
                continue
            kept = list(old)
            for index, (column, before, after) in enumerate(zip(self.spec, old, shown,
                                                                strict=True)):
                if before != after:
                    self.update_cell(row.key, column.key, after, update_width=True)
                    kept[index] = after
            self._cells[row.key] = tuple(kept)
        order = [row.key for row in rows]
        if self.keys != order:
            # DataTable.sort hands the key function cell values, not row keys. The first cell
            # of each row is a Text object this table holds, so its identity names the row.
            position = {id(self._cells[key][0]): i for i, key in enumerate(order)}
            self.sort(key=lambda values: position[id(values[0])])
        if selected is not None and selected in self._cells:
            self.select(selected)
