"""Modal screens: the `?` key help, the yes/no question before a bulk replay, and the `g`
prompt for a task or trace id."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

KEYS = (
    ("1-7", "Agents · Traces · Breakers · Dead letters · Capabilities · Phrases · Pushes"),
    ("g", "go to a task or trace by its id (or its first 6+ characters)"),
    ("/", "filter this table (words, field:value); enter keeps, esc clears"),
    ("  fields", "agent state breaker capability error caller root trace task"),
    ("↑ ↓ pgup pgdn", "move the cursor; the detail pane follows it"),
    ("d", "Agents, Breakers: drain the selected agent (again: undrain)"),
    ("b", "Agents, Breakers: reset the selected agent's breaker"),
    ("w", "Agents, Breakers: set the selected agent's weight (empty: the declared one)"),
    ("p", "Agents, Breakers: pin a capability to the selected agent (-name unpins)"),
    ("r", "Dead letters: replay the selected letter"),
    ("R", "Dead letters: replay every letter the filter shows"),
    ("e", "Dead letters: replay the selected letter with params you edit (timeout=S too)"),
    ("d", "Dead letters: discard the selected letter, with the reason it can never succeed"),
    ("x", "Phrases: forget the selected learned phrase (routed by evidence again)"),
    ("r", "Phrases: read the learned phrases again"),
    ("r", "Pushes: send the selected task's push notifications again"),
    ("R", "Pushes: send every push notification the filter shows again"),
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


class AskScreen(ModalScreen[str | None]):
    """Asks one question of the operator (an agent's weight, a capability to pin it for);
    enter answers the text, esc answers None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, placeholder: str, hint: str, input_id: str = "ask",
                 value: str = "") -> None:
        super().__init__()
        self.title_text, self.placeholder, self.hint = title, placeholder, hint
        self.input_id, self.value = input_id, value

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Static(self.title_text)
            yield Input(self.value, placeholder=self.placeholder, id=self.input_id)
            yield Static(self.hint, classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class GotoScreen(AskScreen):
    """Asks for a task or trace id; enter answers it, esc answers None."""

    def __init__(self) -> None:
        super().__init__("Go to a task or trace", "task or trace id, or its first 6+ characters",
                         "enter goes · esc cancels · every task in the store is found",
                         input_id="goto-id")
