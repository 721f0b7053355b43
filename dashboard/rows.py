"""Table rows from feed objects: pure functions of an object and the feed's clock.

Each table is a list of :class:`Column` and a function that turns one feed object into a
:class:`Row` (a stable key, the cells, and the text the `/` filter searches). Ages are
``at - <timestamp>`` with ``at`` taken from the last frame, never the local clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from reach.wire import admin

STATE_STYLE = {"online": "green", "suspected": "yellow", "offline": "red"}
BREAKER_STYLE = {"closed": "green", "half_open": "yellow", "open": "bold red"}
TRACE_STYLE = {"succeeded": "green", "running": "cyan", "failed": "red", "dead": "bold red"}
OUTCOME_STYLE = {"ok": "green", "answer": "yellow", "running": "cyan", "cancelled": "grey50"}
"""Attempt outcomes; the others (fault, timeout, lost, undelivered) are red."""

DASH = "—"


@dataclass(frozen=True)
class Column:
    """One table column: its key (used by ``update_cell``), header and fixed width."""

    key: str
    label: str
    width: int | None = None


@dataclass(frozen=True)
class Row:
    """One table row: ``key`` is the feed id, ``fields`` the filter's searchable text."""

    key: str
    cells: tuple[Text, ...]
    fields: dict[str, str] = field(default_factory=dict)


RowMaker = Callable[[Any, float], Row]
"""``agent_row``, ``trace_row``...: a feed object (an admin model) and the clock."""

# ---------------------------------------------------------------- formatting


def age(seconds: float | None) -> str:
    """A short duration: ``0.4s``, ``12s``, ``3m04s``, ``2h03m``, ``3d04h``."""
    if seconds is None:
        return DASH
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def millis(ms: float | None) -> str:
    """A latency: ``0.8 ms``, ``21 ms``, ``1.25 s``; a dash when unknown."""
    if ms is None:
        return DASH
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.2f} s"


def plural(count: int, noun: str) -> str:
    """``1 dead letter``, ``3 dead letters``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def short(ident: str | None, width: int = 10) -> str:
    """The head of a long hex id, enough to tell rows apart by eye."""
    return (ident or DASH)[:width]


def load_bar(inflight: int, limit: int, width: int = 6) -> Text:
    """``██░░░░ 3/20``: in-flight work against the agent's ``max_concurrency``."""
    share = inflight / limit if limit > 0 else 0.0
    filled = min(width, round(share * width))
    if inflight and not filled:
        filled = 1
    style = "green" if share < 0.5 else "yellow" if share < 0.9 else "red"
    bar = Text()
    bar.append("█" * filled, style=style)
    bar.append("░" * (width - filled), style="grey35")
    bar.append(f" {inflight}/{limit}")
    return bar


def styled(value: str, styles: dict[str, str], label: str | None = None) -> Text:
    return Text(label if label is not None else value, style=styles.get(value, ""))


def breaker_text(state: str) -> Text:
    return styled(state, BREAKER_STYLE, state.replace("_", "-"))


def error_text(error: Any, width: int = 48) -> str:
    """``code: message`` of an error object, cut to ``width``."""
    if not isinstance(error, dict):
        return DASH if error is None else str(error)[:width]
    text = f"{error.get('code', 'error')}: {error.get('message', '')}".strip()
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------- agents

AGENT_COLUMNS = (
    Column("agent", "Agent", 12), Column("state", "State", 17), Column("load", "In flight", 12),
    Column("p95", "P95", 7), Column("calls", "Calls", 6), Column("faults", "Faults", 6),
    Column("breaker", "Breaker", 9), Column("beat", "Beat", 5), Column("kind", "Kind", 9),
    Column("caps", "Capabilities"),
)


def agent_row(view: admin.AgentView, at: float) -> Row:
    state = view.state
    label = state
    if view.draining:
        label += " · draining"
    if not view.connected and state != "offline":
        label += " · lost"  # its connection, that is: the outcome name for it
    beat = at - view.last_beat if view.last_beat else view.since_heartbeat_s
    caps = ", ".join(view.capabilities)
    return Row(
        key=view.agent_id,
        cells=(
            Text(view.name), styled(state, STATE_STYLE, label),
            load_bar(view.inflight, view.max_concurrency),
            Text(millis(view.p95_ms), justify="right"),
            Text(str(view.calls), justify="right"),
            Text(str(view.faults), justify="right", style="red" if view.faults else ""),
            breaker_text(view.breaker), Text(age(beat), justify="right"),
            Text(view.kind, style="dim" if view.kind == "websocket" else "magenta"), Text(caps),
        ),
        fields={"agent": view.name, "id": view.agent_id, "state": label,
                "breaker": view.breaker, "capability": caps, "version": view.version,
                "kind": view.kind},
    )


# ---------------------------------------------------------------- breakers

BREAKER_COLUMNS = (
    Column("agent", "Agent", 16), Column("breaker", "Breaker", 9),
    Column("rate", "Fault rate", 16), Column("probe", "Next probe", 12),
    Column("faults", "Faults", 6), Column("calls", "Calls", 7), Column("state", "Agent state", 12),
)


def next_probe(detail: admin.BreakerDetail | None, state: str) -> Text:
    """When an open breaker lets its probe through; a half-open one is probing now."""
    if state == "half_open":
        return Text("probing", style="yellow")
    seconds = detail.next_probe_in_s if detail is not None else None
    if state == "open" and seconds is not None:
        return Text(f"in {age(seconds)}", style="red")
    return Text(DASH)


def breaker_row(view: admin.AgentView, at: float) -> Row:
    detail = view.breaker_detail
    state = detail.state if detail is not None and detail.state else view.breaker
    rate = detail.fault_rate if detail is not None else 0.0
    rate_text = Text()
    rate_text.append(f"{rate:4.0%}", style="red" if rate >= 0.5 else "yellow" if rate else "")
    rate_text.append(f" of last {detail.window}" if detail is not None else "")
    return Row(
        key=view.agent_id,
        cells=(
            Text(view.name), breaker_text(state), rate_text,
            next_probe(detail, state), Text(str(view.faults), justify="right"),
            Text(str(view.calls), justify="right"),
            styled(view.state, STATE_STYLE),
        ),
        fields={"agent": view.name, "id": view.agent_id, "breaker": state,
                "state": view.state},
    )


# ---------------------------------------------------------------- traces

TRACE_COLUMNS = (
    Column("trace", "Trace", 10), Column("root", "Root", 18), Column("caller", "Caller", 12),
    Column("tasks", "Tasks", 5), Column("state", "State", 9), Column("duration", "Duration", 9),
    Column("age", "Age", 7), Column("failed", "Failed at"),
)


def trace_row(summary: admin.TraceSummary, at: float) -> Row:
    started = summary.started_at
    if summary.duration_ms is None and started is not None:
        took = Text(age(at - started) + "…", style="cyan", justify="right")
    else:
        took = Text(millis(summary.duration_ms), justify="right")
    failed = summary.failed_capability or ""
    root = summary.root or ""
    return Row(
        key=summary.trace_id,
        cells=(
            Text(short(summary.trace_id)), Text(root), Text(summary.caller or DASH),
            Text(str(summary.tasks), justify="right"), styled(summary.state, TRACE_STYLE),
            took, Text(age(at - started if started is not None else None), justify="right"),
            Text(failed, style="red"),
        ),
        fields={"trace": summary.trace_id, "root": root, "caller": summary.caller or "",
                "state": summary.state, "capability": failed},
    )


# ---------------------------------------------------------------- dead letters

LETTER_COLUMNS = (
    Column("task", "Task", 10), Column("capability", "Capability", 18),
    Column("agent", "Agent", 14), Column("error", "Error", 40),
    Column("attempts", "Tries", 5), Column("state", "State", 9), Column("age", "Age", 7),
)

def letter_state(letter: admin.DeadLetter) -> Text:
    """``dead``, or ``replaying`` while a replay of the letter runs (it stays listed until
    the replay succeeds)."""
    if (letter.state or "dead") == "dead":
        return Text("dead", style="red")
    return Text("replaying", style="cyan")


def letter_row(letter: admin.DeadLetter, at: float) -> Row:
    return Row(
        key=letter.task_id,
        cells=(
            Text(short(letter.task_id)), Text(letter.capability),
            Text(letter.agent or DASH), Text(error_text(letter.error, 40), style="red"),
            Text(str(len(letter.attempts)), justify="right"), letter_state(letter),
            Text(age(at - letter.dead_since), justify="right"),
        ),
        fields={"task": letter.task_id, "capability": letter.capability,
                "agent": letter.agent or "", "caller": letter.caller,
                "error": error_text(letter.error, width=10_000),
                "state": letter_state(letter).plain},
    )
