"""The Traces tab: recent traces, newest first, and the selected one's waterfall."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from reach.wire import admin

from ..rows import TRACE_COLUMNS, Row, trace_row
from ..waterfall import render
from .base import TableView


class Waterfall(Widget):
    """The hops of one trace, bars scaled to the trace's duration; failed hops in red."""

    timeline: reactive[admin.Timeline | None] = reactive(None, layout=True)
    message: reactive[str] = reactive("select a trace to see its hops", layout=True)

    def render(self) -> Text:
        if self.timeline is None:
            return Text(self.message, style="grey50")
        return render(self.timeline, self.content_size.width)


class TracesView(TableView):
    """Trace summaries; moving the cursor asks the app for the trace's timeline."""

    COLUMNS = TRACE_COLUMNS
    NOUN = "trace"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("c", "cancel", "Cancel running")]

    class Cancel(Message):
        """Asks the app to cancel these running tasks of trace ``trace_id`` (it confirms)."""

        def __init__(self, trace_id: str, task_ids: list[str]) -> None:
            super().__init__()
            self.trace_id = trace_id
            self.task_ids = task_ids

    class TraceSelected(Message):
        """The cursor is on ``trace_id`` (or its summary changed): fetch its timeline."""

        def __init__(self, trace_id: str) -> None:
            super().__init__()
            self.trace_id = trace_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._wanted: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        yield from super().compose()
        with VerticalScroll(id="waterfall-box"):
            yield Waterfall(id="waterfall")

    @property
    def waterfall(self) -> Waterfall:
        return self.query_one(Waterfall)

    def rows(self) -> list[Row]:
        at = self.model.at
        return [trace_row(summary, at) for summary in self.model.traces_newest_first()]

    def selection_changed(self, key: str | None) -> None:
        summary = self.model.traces.get(key) if key is not None else None
        if summary is None or key is None:
            self._wanted = None
            return
        # A running trace grows: fetch again when its summary says something moved on.
        version = f"{summary.state}/{summary.tasks}/{summary.ended_at}"
        if self._wanted == (key, version):
            return
        self._wanted = (key, version)
        self.post_message(self.TraceSelected(key))

    def action_cancel(self) -> None:
        """Cancel the selected trace's tasks still running (the app asks first)."""
        timeline = self.waterfall.timeline
        key = self.selected_key
        if key is None or timeline is None or timeline.trace_id != key:
            self.notify("no trace selected", severity="warning")
            return
        running = [t.task_id for t in timeline.tasks if t.state == "running"]
        if not running:
            self.notify("nothing of this trace is running", severity="warning")
            return
        self.post_message(self.Cancel(key, running))

    def show_timeline(self, timeline: admin.Timeline | None, message: str = "") -> None:
        """Called by the app with the fetched timeline (or why there is none)."""
        for waterfall in self.query(Waterfall):  # none once the app is shutting down
            if message:
                waterfall.message = message
            waterfall.timeline = timeline
