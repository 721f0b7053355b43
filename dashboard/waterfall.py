"""A trace's hops as a waterfall: one line per hop, bars scaled to the trace's duration.

:func:`layout` is the arithmetic (where each bar starts and how long it is, in columns);
:func:`render` turns it into Rich text for a given width. Both are pure, so the picture is
tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from .model import JSON
from .rows import millis, short

PHASE_STYLE = {"queued": "grey50", "delivered": "blue", "processing": "green",
               "retry": "yellow", "done": "bold"}
FAILED_STYLE = "bold red"
LABEL_WIDTH = 32
DURATION_WIDTH = 9
DETAIL_WIDTH = 28


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


def span_s(timeline: JSON) -> tuple[float, float]:
    """The trace's start and its length in seconds: the reported duration, or up to the
    latest hop while the trace is still running."""
    start = float(timeline.get("started_at") or 0.0)
    duration = timeline.get("duration_ms")
    if duration is not None:
        return start, float(duration) / 1000
    ends = [h.get("end") or h.get("start") or start for h in timeline.get("hops") or []]
    return start, max([0.0, *(float(e) - start for e in ends)])


def layout(timeline: JSON, width: int) -> list[Bar]:
    """Place every hop on a bar area ``width`` columns wide."""
    start, total = span_s(timeline)
    width = max(1, width)
    bars: list[Bar] = []
    for hop in timeline.get("hops") or []:
        begin = float(hop.get("start") or start) - start
        end = float(hop.get("end") if hop.get("end") is not None else hop.get("start") or start)
        end -= start
        if total > 0:
            # Both ends are rounded, so hops that follow each other abut on screen.
            offset = min(width - 1, max(0, round(begin / total * width)))
            length = max(1, round(end / total * width) - offset)
        else:
            offset, length = 0, 1
        length = min(length, width - offset)
        phase = str(hop.get("phase", ""))
        attempt = hop.get("attempt")
        label = "  " * int(hop.get("depth") or 0) + f"{hop.get('capability', '')} {phase}"
        if attempt is not None and phase in ("delivered", "processing"):
            label += f" #{attempt}"
        detail = " ".join(str(x) for x in (hop.get("agent"), hop.get("note")) if x)
        bars.append(Bar(label=label, phase=phase, offset=offset, length=length,
                        duration_ms=hop.get("duration_ms"), failed=bool(hop.get("failed")),
                        detail=detail))
    return bars


def retries(timeline: JSON) -> int:
    """How many retry back-offs the trace went through."""
    return sum(1 for h in timeline.get("hops") or [] if h.get("phase") == "retry")


def render(timeline: JSON, width: int) -> Text:
    """The waterfall as text, ``width`` columns wide: a header line, a time ruler, then per
    hop its label, its bar, its duration and the agent and note, one line each."""
    bar_width = max(10, width - LABEL_WIDTH - DURATION_WIDTH - DETAIL_WIDTH - 3)
    detail_width = max(0, width - LABEL_WIDTH - bar_width - DURATION_WIDTH - 3)
    _, total = span_s(timeline)
    tasks = timeline.get("tasks") or []
    failing = sum(1 for t in tasks if t.get("state") in ("failed", "dead"))
    backoffs = retries(timeline)
    text = Text(no_wrap=True, overflow="crop")
    text.append(f"trace {short(timeline.get('trace_id'), 16)}", style="bold")
    text.append(f" · {len(tasks)} task{'s' * (len(tasks) != 1)} · {millis(total * 1000)}")
    text.append(f" · {backoffs} retr{'y' if backoffs == 1 else 'ies'}")
    if failing:
        text.append(f" · {failing} failed", style=FAILED_STYLE)
    text.append("\n" + " " * (LABEL_WIDTH + 1))
    text.append(f"0{millis(total * 1000):>{bar_width - 1}}", style="grey50")
    for bar in layout(timeline, bar_width):
        style = FAILED_STYLE if bar.failed else PHASE_STYLE.get(bar.phase, "")
        text.append("\n")
        text.append(f"{clip(bar.label, LABEL_WIDTH):<{LABEL_WIDTH}} ",
                    style=FAILED_STYLE if bar.failed else "")
        text.append(" " * bar.offset)
        text.append(("◆" if bar.phase == "done" else "█") * bar.length, style=style)
        text.append(" " * (bar_width - bar.offset - bar.length))
        shown = "" if bar.phase == "done" else millis(bar.duration_ms)
        text.append(f" {shown:>{DURATION_WIDTH}} ")
        if bar.detail and detail_width:
            text.append(clip(bar.detail, detail_width), style="red" if bar.failed else "grey50")
    return text


def clip(value: str, width: int) -> str:
    return value if len(value) <= width else value[: max(0, width - 1)] + "…"
