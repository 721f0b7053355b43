"""The status line: the feed connection's state, the alerts firing now (in red, first, so a
narrow terminal still shows them) and a one-line summary of the coordinator."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from reach.core import alerts
from reach.wire import admin

from ..model import Model
from ..rows import age, millis, plural


@dataclass(frozen=True)
class Link:
    """Where the feed connection stands. ``state`` is ``connecting``, ``connected``,
    ``disconnected`` (reconnecting) or ``refused`` (wrong token: not retried)."""

    state: str
    detail: str = ""


LINK_LOOK = {"connecting": ("◌", "yellow"), "connected": ("●", "green"),
             "disconnected": ("✕", "bold red"), "refused": ("✕", "bold red")}


def summary(model: Model) -> str:
    """Agents, dead letters and totals, from the last frame."""
    if not model.frames:
        return ""
    online = sum(1 for a in model.agents.values() if a.state == "online" and not a.draining)
    drained = sum(1 for a in model.agents.values() if a.draining)
    totals = model.totals()
    parts = [f"{plural(len(model.agents), 'agent')} ({online} online"
             + (f", {drained} drained)" if drained else ")"),
             plural(len(model.dead_letters), "dead letter")]
    if totals is not None:
        parts.append(f"{totals.calls} calls, {totals.faults} faults")
        parts.append(f"p50 {millis(totals.p50_ms)}")
    if model.coordinator is not None:
        parts.append(f"up {age(model.at - model.coordinator.started_at)}")
    return " · ".join(parts)


def alert_line(model: Model) -> str:
    """``2 alerts: breaker open 61 s on ledger-writer; no agent for ledger.write for 12 s``
    (ages against the coordinator's clock of the last frame); empty with none firing."""
    if not model.alerts:
        return ""
    parts = [summary_of(a, model.at) for a in model.alerts]
    return f"{plural(len(parts), 'alert')}: " + "; ".join(parts)


def summary_of(view: admin.AlertView, at: float) -> str:
    """One alert's text, its age brought up to ``at`` (a breaker stays open as time passes)."""
    return alerts.summary(view.kind, view.capability, view.agent, view.value, view.threshold,
                          at - view.since)


def status_text(link: Link, url: str, model: Model, note: str,
                width: int | None = None) -> Text:
    """The line, most urgent first: the link, the alerts, the outcome of the operator's last
    command, then the URL and the summary. The line never wraps (app.tcss: a wrapped line
    lost its end out of sight, mid-message): what does not fit is cut with "…", from the
    summary's end. Given the ``width`` it has, the summary drops its last parts whole
    (``· …`` says so) rather than end mid-word."""
    icon, style = LINK_LOOK.get(link.state, ("?", ""))
    text = Text()
    text.append(f"{icon} {link.detail or link.state}", style=style)
    firing = alert_line(model)
    if firing:
        text.append(f"  ⚠ {firing}", style="bold red")
    if note:
        text.append(f"  │ {note} │", style="italic")
    text.append(f"  {url}", style="grey50")
    line = summary(model)
    parts = line.split(" · ") if line else []

    def head(keep: int) -> str:
        return " · ".join(parts[:keep] + (["…"] if keep < len(parts) else []))

    keep = len(parts)
    while width is not None and keep and text.cell_len + 2 + cell_len(head(keep)) > width:
        keep -= 1
    if parts:
        text.append(f"  {head(keep)}")
    return text


class StatusLine(Static):
    """One line at the top of the dashboard; the app sets :attr:`link` and :attr:`note`."""

    link: reactive[Link] = reactive(Link("connecting"))
    note: reactive[str] = reactive("")
    """The outcome of the last command (replay, drain...)."""

    def __init__(self, url: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.url = url
        self.model = Model()

    def show(self, model: Model) -> None:
        self.model = model
        self._redraw()

    def watch_link(self) -> None:
        self._redraw()

    def watch_note(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.content_region.width or None  # 0 before the first layout
        self.update(status_text(self.link, self.url, self.model, self.note, width))
