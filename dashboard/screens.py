"""Modal screens: the `?` key help, and the yes/no question before a bulk replay."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("1 2 3 4", "Agents · Traces · Breakers · Dead letters"),
    ("/", "filter this table (words, field:value); enter keeps, esc clears"),
    ("  fields", "agent state breaker capability error caller root trace task"),
    ("↑ ↓ pgup pgdn", "move the cursor; the detail pane follows it"),
    ("d", "Agents, Breakers: drain the selected agent (again: undrain)"),
    ("b", "Agents, Breakers: reset the selected agent's breaker"),
    ("r", "Dead letters: replay the selected letter"),
    ("R", "Dead letters: replay every letter the filter shows"),
    ("?", "this help"),
    ("q", "quit"),
)


def key_table() -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for keys, meaning in KEYS:
        table.add_row(keys, meaning)
    return table


class HelpScreen(ModalScreen[None]):
    """The key bindings, over the dashboard; any of esc, ? or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static("reach-dash keys", classes="title")
            yield Static(key_table())
            yield Static("esc closes", classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A question answered with y (True) or n / esc (False)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Static(self.question)
            yield Static("y yes · n no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
