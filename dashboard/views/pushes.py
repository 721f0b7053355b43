"""The Pushes tab: the task notifications — A2A push notifications (docs/a2a.md) and completion
webhooks (docs/webhooks.md), told apart by the Kind column — the coordinator did not deliver
after their tries, oldest first, with the selected one whole below; `r` sends the selected task's
again, `R` every one the filter shows, each after a yes.

The admin feed carries no delta for them, so the app reads them with the
``push_dead_letters`` command on the feed's own cadence (each frame, at least one a second)
while this tab is shown or a replay is being followed. A coordinator from before every one had
its sender answers that command ``invalid_params`` without the A2A door: the caption says "no
A2A door" and nothing is asked again until the feed reconnects.
"""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import urlsplit

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from ..filtering import Filter
from ..model import Model, PushLetter
from ..rows import DASH, Column, Row, age, short
from .base import TableView

PUSH_COLUMNS = (
    Column("task", "Task"), Column("kind", "Kind"),
    Column("capability", "Capability", shrink=12, name=True),
    Column("receiver", "Receiver", shrink=16, name=True), Column("reason", "Reason", shrink=20),
    Column("age", "Given up"),
)
NO_DOOR = "no A2A door: this coordinator sends no push notifications"


def receiver(url: str) -> str:
    """The host (and port) a notification goes to: what tells receivers apart at a glance."""
    try:
        return urlsplit(url).netloc or url
    except ValueError:
        return url


def push_row(letter: PushLetter, at: float) -> Row:
    return Row(
        key=letter.key,
        cells=(
            Text(short(letter.task_id)), Text(letter.kind),
            Text(letter.capability or DASH),
            Text(receiver(letter.url)), Text(letter.reason, style="red"),
            Text(f"{age(at - letter.dead_at)} ago", justify="right"),
        ),
        fields={"task": letter.task_id, "kind": letter.kind, "capability": letter.capability,
                "caller": letter.caller, "url": letter.url, "error": letter.reason,
                "state": letter.state},
    )


def push_detail(letter: PushLetter, at: float) -> RenderableType:
    """The whole notification: whose task, where it goes, and why it was given up."""
    text = Text()
    text.append(letter.capability or "?", style="bold")
    text.append(f"  task {letter.task_id} ({letter.state or '?'})  "
                f"caller {letter.caller or DASH}\n")
    text.append("to ", style="grey62")
    text.append(f"{letter.url}\n")
    text.append("config ", style="grey62")
    text.append(f"{letter.config_id or DASH} ({letter.kind})\n")
    given_up = f"given up {age(at - letter.dead_at)} ago"
    if letter.node:
        given_up += f" by node {letter.node}"
    text.append(given_up + ": ", style="grey62")
    text.append(letter.reason or DASH, style="red")
    return text


class PushesView(TableView):
    """Push notifications not delivered, oldest first, with the selected one whole."""

    COLUMNS = PUSH_COLUMNS
    NOUN = "undelivered push notification"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "replay", "Send again"),
        Binding("R", "replay_shown", "Send all shown again"),
    ]

    problem: str = ""
    """Why the last read failed, or that there is no A2A door (the caption says it)."""
    no_door: bool = False
    """The coordinator serves no A2A door: nothing to read until the feed reconnects."""

    class Replay(Message):
        """Asks the app to send these tasks' notifications again (after a yes).
        ``everything``: no filter is set, so one command sends every one."""

        def __init__(self, task_ids: list[str], count: int, *,
                     everything: bool = False) -> None:
            super().__init__()
            self.task_ids = task_ids
            self.count = count
            self.everything = everything

    def compose(self) -> ComposeResult:
        yield from super().compose()
        with VerticalScroll(id="push-box"):
            yield Static(Text("no push notification selected", style="grey50"),
                         id="push-detail")

    def rows(self) -> list[Row]:
        return [push_row(letter, self.model.at) for letter in self.model.pushes_oldest_first()]

    def caption(self, total: int, wanted: Filter) -> str:
        if self.problem:
            return self.problem
        if self.model.pushes is None:
            return "reading the push notifications not delivered…"
        if not total:
            return "no undelivered push notifications"
        return super().caption(total, wanted)

    def selection_changed(self, key: str | None) -> None:
        letter = (self.model.pushes or {}).get(key) if key is not None else None
        detail = self.query_one("#push-detail", Static)
        if letter is None:
            detail.update(Text("no push notification selected" if self.model.pushes
                               else "", style="grey50"))
        else:
            detail.update(push_detail(letter, self.model.at))

    # ------------------------------------------------------------ reads, from the app

    def read(self, model: Model) -> None:
        """A read succeeded: the caption counts again."""
        self.problem, self.no_door = "", False
        self.show(model)

    def failed(self, problem: str, *, no_door: bool = False) -> None:
        """A read failed (or there is no A2A door): say so in the caption, keep what was
        shown."""
        self.problem, self.no_door = problem, no_door
        self.resync()

    # ------------------------------------------------------------ keys

    def action_replay(self) -> None:
        """Send the selected notification's task's notifications again (after a yes)."""
        key = self.selected_key
        letter = (self.model.pushes or {}).get(key) if key is not None else None
        if letter is None:
            self.notify("no push notification selected", severity="warning")
            return
        count = sum(1 for d in self.model.pushes_oldest_first() if d.task_id == letter.task_id)
        self.post_message(self.Replay([letter.task_id], count))

    def action_replay_shown(self) -> None:
        """Send every notification the current filter shows again (after a yes)."""
        letters = [(self.model.pushes or {}).get(row.key) for row in self.shown]
        tasks = list(dict.fromkeys(d.task_id for d in letters if d is not None))
        if not tasks:
            self.notify("no push notifications to send again", severity="warning")
            return
        self.post_message(self.Replay(tasks, len(self.shown),
                                      everything=not self.filter_text.strip()))
