"""The Dead letters tab: unresolved letters, a detail pane, `r` replay one, `R` replay all shown."""

from __future__ import annotations

import json
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from reach.wire import admin

from ..rows import (
    DASH,
    LETTER_COLUMNS,
    OUTCOME_STYLE,
    Row,
    age,
    clip,
    error_text,
    letter_row,
    millis,
)
from .base import TableView

ERROR_WIDTH = 1000
"""The longest error text kept in the detail pane; the pane's width cuts it (with "…")."""


def letter_detail(letter: admin.DeadLetter, at: float) -> RenderableType:
    """The whole letter: who, what failed, every attempt, and the envelope as sent."""
    head = Text()
    head.append(letter.capability, style="bold")
    head.append(f"  task {letter.task_id}  caller {letter.caller or DASH}\n")
    head.append(error_text(letter.error, width=200), style="red")
    for earlier in reversed(letter.earlier_errors):  # each replay replaced one, newest first
        head.append(f"\nreplayed {age(at - earlier.at)} ago; it had died with ", style="grey62")
        head.append(clip(earlier.error, 200), style="red")
    rows: list[tuple[Text, ...]] = [
        (Text(str(attempt.number)), Text(attempt.agent or DASH),
         Text(attempt.outcome, style=OUTCOME_STYLE.get(attempt.outcome, "red")),
         Text(millis(attempt.duration_ms)), Text(f"{age(at - attempt.started_at)} ago"),
         Text(error_text(attempt.error, width=ERROR_WIDTH) if attempt.error else "",
              no_wrap=True, overflow="ellipsis"))
        for attempt in letter.attempts]
    if not letter.attempts:
        rows.append((Text(), Text("no attempt was made", style="grey50"), *[Text()] * 4))
    labels = ("#", "agent", "outcome", "took", "started")
    attempts = Table(box=None, pad_edge=False, expand=False, header_style="bold")
    for index, label in enumerate(labels):  # whole: the error column gives way, not these
        width = max([len(label), *(row[index].cell_len for row in rows)])
        attempts.add_column(label, no_wrap=True, min_width=width)
    # As wide as the pane allows, and cut with "…" only past it (a fixed cut lost the end
    # of an error in a wide pane, without saying so).
    attempts.add_column("error", overflow="ellipsis")
    for row in rows:
        attempts.add_row(*row)
    envelope = json.dumps(letter.envelope, indent=2, sort_keys=True)
    return Group(head, Text(""), Text("attempts", style="bold underline"), attempts, Text(""),
                 Text("envelope", style="bold underline"), Text(envelope, style="grey70"))


class DeadLettersView(TableView):
    """Dead letters, oldest first, with the selected one's envelope and attempts."""

    COLUMNS = LETTER_COLUMNS
    NOUN = "dead letter"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "replay", "Replay"),
        Binding("R", "replay_shown", "Replay all shown"),
        Binding("e", "replay_edited", "Replay with new params"),
        Binding("d", "discard", "Discard"),
    ]

    class Replay(Message):
        """Asks the app to replay these letters. ``everything`` is true when no filter is
        set, so the app may ask the coordinator to replay every letter in one command."""

        def __init__(self, task_ids: list[str], *, everything: bool = False,
                     confirm: bool = False) -> None:
            super().__init__()
            self.task_ids = task_ids
            self.everything = everything
            self.confirm = confirm

    class Settle(Message):
        """Asks the app to settle the letter ``task_id``: ``discard`` it with a reason, or
        ``replay`` it with params (and a timeout) the operator edits first."""

        def __init__(self, task_id: str, how: str) -> None:
            super().__init__()
            self.task_id = task_id
            self.how = how

    def compose(self) -> ComposeResult:
        yield from super().compose()
        with VerticalScroll(id="letter-box"):
            yield Static(Text("no dead letters", style="grey50"), id="letter-detail")

    def rows(self) -> list[Row]:
        return [letter_row(letter, self.model.at) for letter in self.model.letters_oldest_first()]

    def selection_changed(self, key: str | None) -> None:
        letter = self.model.dead_letters.get(key) if key is not None else None
        detail = self.query_one("#letter-detail", Static)
        if letter is None:
            detail.update(Text("no dead letter selected" if self.model.dead_letters
                               else "no dead letters", style="grey50"))
        else:
            detail.update(letter_detail(letter, self.model.at))

    def action_replay(self) -> None:
        """Replay the selected letter."""
        key = self.selected_key
        if key is None:
            self.notify("no dead letter selected", severity="warning")
            return
        self.post_message(self.Replay([key]))

    def action_discard(self) -> None:
        """Discard the selected letter (the app asks why)."""
        self._settle("discard")

    def action_replay_edited(self) -> None:
        """Replay the selected letter with params the operator edits first."""
        self._settle("replay")

    def _settle(self, how: str) -> None:
        key = self.selected_key
        if key is None:
            self.notify("no dead letter selected", severity="warning")
            return
        self.post_message(self.Settle(key, how))

    def action_replay_shown(self) -> None:
        """Replay every letter the current filter shows (after a confirmation)."""
        keys = [row.key for row in self.shown]
        if not keys:
            self.notify("no dead letters to replay", severity="warning")
            return
        self.post_message(self.Replay(keys, everything=not self.filter_text.strip(),
                                      confirm=True))
