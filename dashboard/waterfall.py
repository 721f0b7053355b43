"""A trace's hops as a waterfall: one line per hop, bars scaled to the trace's duration.

:func:`layout` is the arithmetic (where each bar starts and how long it is, in columns);
:func:`render` turns it into Rich text for a given width. Both are pure, so the picture is
tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from reach.wire import admin

from .rows import millis, short

PHASE_STYLE = {"queued": "grey50", "delivered": "blue", "processing": "green",
               "retry": "yellow", "done": "bold"}
FAILED_STYLE = "bold red"
LABEL_WIDTH = 32
DURATION_WIDTH = 9
DETAIL_WIDTH = 28
BAR_WIDTH = 40
"""The bars' share when labels or details want more than the room: labels and details take
what they need beyond their usual widths only while the bars keep this many columns."""


@dataclass(frozen=True)
class Bar:
    """One hop placed on the time axis: ``offset`` and ``length`` are in columns."""

    label: str
    phase: str
    offset: int
    length: int
    duration_ms: float | None
    failed: bool
    detail: str


def span_s(timeline: admin.Timeline) -> tuple[float, float]:
    """The trace's start and its length in seconds: the reported duration, or up to the
    latest hop while the trace is still running."""
    start = timeline.started_at or 0.0
    if timeline.duration_ms is not None:
        return start, timeline.duration_ms / 1000
    ends = [end_of(hop) for hop in timeline.hops]
    return start, max([0.0, *(e - start for e in ends)])


def end_of(hop: admin.Hop) -> float:
    """Where a hop's bar stops: its end, or its start while it is still going on."""
    return hop.end if hop.end is not None else hop.start


def layout(timeline: admin.Timeline, width: int) -> list[Bar]:
    """Place every hop on a bar area ``width`` columns wide."""
    start, total = span_s(timeline)
    width = max(1, width)
    bars: list[Bar] = []
    for hop in timeline.hops:
        begin = hop.start - start
        end = end_of(hop) - start
        if total > 0:
            # Both ends are rounded, so hops that follow each other abut on screen.
            offset = min(width - 1, max(0, round(begin / total * width)))
            length = max(1, round(end / total * width) - offset)
        else:
            offset, length = 0, 1
        length = min(length, width - offset)
        label = "  " * hop.depth + f"{hop.capability} {hop.phase}"
        if hop.attempt is not None and hop.phase in ("delivered", "processing"):
            label += f" #{hop.attempt}"
        detail = " ".join(x for x in (hop.agent, hop.note) if x)
        bars.append(Bar(label=label, phase=hop.phase, offset=offset, length=length,
                        duration_ms=hop.duration_ms, failed=hop.failed, detail=detail))
    return bars


def retries(timeline: admin.Timeline) -> int:
    """How many retry back-offs the trace went through."""
    return sum(1 for h in timeline.hops if h.phase == "retry")


def render(timeline: admin.Timeline, width: int) -> Text:
    """The waterfall as text, ``width`` columns wide: a header line, a time ruler, then per
    hop its label, its bar, its duration and the agent and note, one line each."""
    bars = layout(timeline, 1)
    label_width, detail_width = widths(bars, width)
    bar_width = max(10, width - label_width - DURATION_WIDTH - detail_width - 3)
    detail_width = max(0, width - label_width - bar_width - DURATION_WIDTH - 3)
    _, total = span_s(timeline)
    tasks = timeline.tasks
    failing = sum(1 for t in tasks if t.state in ("failed", "dead"))
    backoffs = retries(timeline)
    text = Text(no_wrap=True, overflow="crop")
    text.append(f"trace {short(timeline.trace_id, 16)}", style="bold")
    text.append(f" · {len(tasks)} task{'s' * (len(tasks) != 1)} · {millis(total * 1000)}")
    text.append(f" · {backoffs} retr{'y' if backoffs == 1 else 'ies'}")
    if failing:
        text.append(f" · {failing} failed", style=FAILED_STYLE)
    text.append("\n" + " " * (label_width + 1))
    text.append(f"0{millis(total * 1000):>{bar_width - 1}}", style="grey50")
    for bar in layout(timeline, bar_width):
        style = FAILED_STYLE if bar.failed else PHASE_STYLE.get(bar.phase, "")
        text.append("\n")
        text.append(f"{clip(bar.label, label_width):<{label_width}} ",
                    style=FAILED_STYLE if bar.failed else "")
        text.append(" " * bar.offset)
        text.append(("◆" if bar.phase == "done" else "█") * bar.length, style=style)
        text.append(" " * (bar_width - bar.offset - bar.length))
        shown = "" if bar.phase == "done" else millis(bar.duration_ms)
        text.append(f" {shown:>{DURATION_WIDTH}} ")
        if bar.detail and detail_width:
            text.append(clip(bar.detail, detail_width), style="red" if bar.failed else "grey50")
    return text


def widths(bars: list[Bar], width: int) -> tuple[int, int]:
    """The label and detail columns for a waterfall ``width`` wide: each as wide as its
    longest text, shrinking (the detail first) toward :data:`LABEL_WIDTH` and
    :data:`DETAIL_WIDTH` only while the bars would get fewer than :data:`BAR_WIDTH` columns.
    A name or an error is cut (with "…") only when the pane is too narrow for it."""
    label = max([LABEL_WIDTH, *(len(bar.label) for bar in bars)])
    detail = max([0, *(len(bar.detail) for bar in bars if bar.detail)])
    room = width - DURATION_WIDTH - 3 - BAR_WIDTH
    detail = max(min(detail, DETAIL_WIDTH), min(detail, room - label))
    label = max(LABEL_WIDTH, min(label, room - detail))
    return label, detail


def clip(value: str, width: int) -> str:
    return value if len(value) <= width else value[: max(0, width - 1)] + "…"
