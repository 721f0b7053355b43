"""A DataTable kept in step with a list of rows by key, in place.

Live updates must not flicker or lose the cursor, so :meth:`LiveTable.sync` never clears the
table: it removes rows that went away, adds new ones, rewrites only the cells that changed,
reorders when the order changed, and puts the cursor back on the row it was on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from ..rows import Column, Row


class LiveTable(DataTable[Text]):
    """Row-cursor table whose rows are keyed by feed id (agent, trace or task id)."""

    def __init__(self, columns: Sequence[Column], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.spec = tuple(columns)
        self._cells: dict[str, tuple[Text, ...]] = {}
        for column in self.spec:
            self.add_column(column.label, key=column.key, width=column.width)

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

    def sync(self, rows: Sequence[Row]) -> None:
        """Make the table show exactly ``rows``, in that order, changing as little as it can."""
        selected = self.selected_key
        wanted = {row.key for row in rows}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
        for row in rows:
            old = self._cells.get(row.key)
            if old is None:
                self.add_row(*row.cells, key=row.key)
                self._cells[row.key] = row.cells
                continue
            kept = list(old)
            for index, (column, before, after) in enumerate(zip(self.spec, old, row.cells,
                                                                strict=True)):
                if before != after:
                    self.update_cell(row.key, column.key, after)
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
