"""The `/` filter box: an Input that says when the operator clears it with esc."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class FilterBox(Input):
    """Typing filters the current table live; enter keeps the filter, esc clears it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "clear", "Clear filter")]

    class Cleared(Message):
        """The operator dropped the filter."""

    def action_clear(self) -> None:
        self.value = ""
        self.post_message(self.Cleared())
