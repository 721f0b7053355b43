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

from .model import CapabilityView

STATE_STYLE = {"online": "green", "suspected": "yellow", "offline": "red", "drained": "cyan"}
BREAKER_STYLE = {"closed": "green", "half_open": "yellow", "open": "bold red"}
TRACE_STYLE = {"succeeded": "green", "running": "cyan", "failed": "red", "dead": "bold red",
               "cancelled": "grey50"}
OUTCOME_STYLE = {"ok": "green", "answer": "yellow", "running": "cyan", "cancelled": "grey50"}
"""Attempt outcomes; the others (fault, timeout, lost, undelivered) are red."""

DASH = "—"


@dataclass(frozen=True)
class Column:
    """One table column: its key (used by ``update_cell``) and header. A column is as wide as
    its widest cell; one with ``shrink`` (names, capabilities, errors) may be cut down to that
    many characters, marked with …, when the table is wider than the terminal. A ``name``
    column (an agent's, a capability's) is cut only after the others that may shrink (lists,
    errors) are at their floor: it is what the operator reads a row by."""

    key: str
    label: str
    shrink: int | None = None
    name: bool = False


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
    """``1 dead letter``, ``3 dead letters``, ``2 capabilities``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


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


def clip(value: str, width: int) -> str:
    """``value`` within ``width`` characters, ending in "…" when it had to be cut."""
    return value if len(value) <= width else value[: max(0, width - 1)] + "…"


def error_text(error: Any, width: int = 48) -> str:
    """``code: message`` of an error object (or an error string), cut to ``width`` with "…"
    (never silently: a cut message must say that it was cut)."""
    if not isinstance(error, dict):
        return DASH if error is None else clip(str(error), width)
    return clip(f"{error.get('code', 'error')}: {error.get('message', '')}".strip(), width)


# ---------------------------------------------------------------- agents

AGENT_COLUMNS = (
    Column("agent", "Agent", shrink=12, name=True), Column("state", "State"),
    Column("load", "In flight"), Column("p95", "P95"), Column("calls", "Calls"),
    Column("faults", "Faults"), Column("breaker", "Breaker"), Column("beat", "Beat"),
    Column("node", "Node", shrink=8, name=True),
    Column("kind", "Kind"), Column("caps", "Capabilities", shrink=14),
)
"""The Node column is always there, even for one coordinator: the columns stay put when a
peer links (the feed keeps a gone peer's agents, offline), and on one node it says which
coordinator this dashboard watches."""


def by_hand(agent: str, overrides: admin.Overrides) -> str:
    """" · pinned x.cap · weight 5": what an operator set for ``agent`` (set_weight, pin)."""
    pinned = sorted(cap for cap, agents in overrides.pins.items() if agent in agents)
    weights = [f"{w.weight:g}" if w.capability is None else f"{w.weight:g} on {w.capability}"
               for w in overrides.weights if w.agent == agent]
    return ("".join(f" · pinned {cap}" for cap in pinned)
            + "".join(f" · weight {w}" for w in weights))


def agent_row(view: admin.AgentView, at: float,
              overrides: admin.Overrides | None = None, here: str | None = None) -> Row:
    """``here``: the node id of the coordinator the feed is from (its own agents' node is
    shown dim, a peer's plain)."""
    state = view.state
    label = state
    if view.draining:  # an operator's choice, not a fault: not "suspected" (issue 14)
        state = label = "drained"
        if view.drained_by == "agent":  # nor the operator's: it closed itself (issue 25)
            label = "closed itself"
    if not view.connected and state != "offline":
        label += " · lost"  # its connection, that is: the outcome name for it
    if overrides is not None:
        label += by_hand(view.name, overrides)
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
            Text(view.node or DASH, style="dim" if view.node in (None, here) else ""),
            Text(view.kind), Text(caps),  # plain: colour means state, and a kind is none
        ),
        fields={"agent": view.name, "id": view.agent_id, "state": label,
                "breaker": view.breaker, "capability": caps, "version": view.version,
                "kind": view.kind, "node": view.node or ""},
    )


# ---------------------------------------------------------------- breakers

BREAKER_COLUMNS = (
    Column("agent", "Agent", shrink=12, name=True), Column("breaker", "Breaker"),
    Column("rate", "Fault rate", shrink=16), Column("opened", "Open for"),
    Column("probe", "Next probe"), Column("faults", "Faults"), Column("calls", "Calls"),
    Column("state", "State"),
)


def next_probe(detail: admin.BreakerDetail | None, state: str, at: float) -> Text:
    """When an open breaker lets its probe through. The probe is the next call routed to the
    agent once the wait is over, so past it the breaker waits for a call, not for time."""
    if state == "half_open":
        return Text("probing", style="yellow")
    seconds = detail.next_probe_in_s if detail is not None else None
    if state != "open" or seconds is None:
        return Text(DASH)
    if seconds > 0:
        return Text(f"in {age(seconds)}", style="red")
    ready = at - detail.probe_after if detail is not None and detail.probe_after else None
    text = Text("next call", style="yellow")
    if ready is not None:
        text.append(f" · ready {age(ready)}", style="grey50")
    return text


def fault_rate(detail: admin.BreakerDetail | None, state: str) -> Text:
    """The share of faults in the window; for a breaker that is not closed, the share that
    tripped it (a failed probe empties the window, and the reason must stay in sight)."""
    text = Text()
    if detail is None:
        return text
    if state != "closed" and detail.tripped_rate is not None:
        text.append(f"tripped {detail.tripped_rate:.0%}", style="red")
        text.append(f" of {detail.tripped_calls}")
        if detail.probe_failed:
            text.append(" · probe failed", style="red")
        return text
    rate = detail.fault_rate
    text.append(f"{rate:4.0%}", style="red" if rate >= 0.5 else "yellow" if rate else "")
    text.append(f" of last {detail.window}")
    return text


def opened(detail: admin.BreakerDetail | None, state: str, at: float) -> Text:
    """How long a breaker that is not closed has been open (since it last opened)."""
    if state == "closed" or detail is None or not detail.opened_at:
        return Text(DASH, justify="right")
    return Text(age(at - detail.opened_at), justify="right")


def breaker_row(view: admin.AgentView, at: float) -> Row:
    detail = view.breaker_detail
    state = detail.state if detail is not None and detail.state else view.breaker
    return Row(
        key=view.agent_id,
        cells=(
            Text(view.name), breaker_text(state), fault_rate(detail, state),
            opened(detail, state, at), next_probe(detail, state, at),
            Text(str(view.faults), justify="right"), Text(str(view.calls), justify="right"),
            styled(view.state, STATE_STYLE),
        ),
        fields={"agent": view.name, "id": view.agent_id, "breaker": state,
                "state": view.state},
    )


# ---------------------------------------------------------------- traces

TRACE_COLUMNS = (
    Column("trace", "Trace"), Column("root", "Root", shrink=12, name=True),
    Column("caller", "Caller", shrink=10, name=True), Column("tasks", "Tasks"),
    Column("state", "State"),
    Column("duration", "Duration"), Column("age", "Age"),
    Column("failed", "Failed at", shrink=12, name=True),
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
    Column("task", "Task"), Column("capability", "Capability", shrink=12, name=True),
    Column("agent", "Agent", shrink=10, name=True), Column("error", "Error", shrink=20),
    Column("attempts", "Tries"), Column("state", "State"), Column("age", "Age"),
)

def letter_state(letter: admin.DeadLetter) -> Text:
    """``dead``, or ``replaying`` while a replay of the letter runs (it stays listed until
    the replay succeeds)."""
    if (letter.state or "dead") == "dead":
        return Text("dead", style="red")
    return Text("replaying", style="cyan")


def letter_error(letter: admin.DeadLetter) -> Text:
    """The letter's error; after a replay that died again, also the one it first died with."""
    text = Text(error_text(letter.error, width=400), style="red")
    if letter.earlier_errors:
        text.append(f" · was {letter.earlier_errors[0].error}", style="grey62")
    return text


def letter_row(letter: admin.DeadLetter, at: float) -> Row:
    return Row(
        key=letter.task_id,
        cells=(
            Text(short(letter.task_id)), Text(letter.capability),
            Text(letter.agent or DASH), letter_error(letter),
            Text(str(len(letter.attempts)), justify="right"), letter_state(letter),
            Text(age(at - letter.dead_since), justify="right"),
        ),
        fields={"task": letter.task_id, "capability": letter.capability,
                "agent": letter.agent or "", "caller": letter.caller,
                "error": " ".join([error_text(letter.error, width=10_000),
                                   *(e.error for e in letter.earlier_errors)]),
                "state": letter_state(letter).plain},
    )


# ---------------------------------------------------------------- capabilities

CAPABILITY_COLUMNS = (
    Column("capability", "Capability", shrink=14, name=True), Column("online", "Online"),
    Column("breakers", "Breakers", shrink=10), Column("calls", "Calls"),
    Column("faults", "Faults"), Column("inflight", "In flight"), Column("p50", "P50"),
    Column("p95", "P95"), Column("p99", "P99"), Column("agents", "Served by", shrink=12),
)


def in_flight(inflight: int, backlog: admin.Backlog | None) -> Text:
    """``4 +12``: attempts in flight, and the tasks waiting their turn behind them (the
    backlog) in yellow, red once the oldest has waited a minute (its age is in
    ``reach.metrics()["backlog"]`` and on ``/metrics``)."""
    text = Text(str(inflight), justify="right")
    if backlog is not None and backlog.waiting:
        text.append(f" +{backlog.waiting}", style="yellow" if backlog.oldest_s < 60 else "red")
    return text


def breaker_counts(agents: tuple[admin.AgentView, ...]) -> Text:
    """``2 closed · 1 open``: the breakers of a capability's agents, worst last."""
    text = Text()
    for state in ("closed", "half_open", "open"):
        count = sum(1 for a in agents if a.breaker == state)
        if count:
            if text:
                text.append(" · ")
            text.append(f"{count} {state.replace('_', '-')}", style=BREAKER_STYLE[state])
    return text or Text(DASH)


def capability_row(cap: CapabilityView, at: float) -> Row:
    series = cap.series or admin.Series()
    online = sum(1 for a in cap.agents if a.state == "online" and a.connected
                 and not a.draining)
    served = Text(", ").join(Text(a.name, style=STATE_STYLE.get(a.state, ""))
                             for a in cap.agents)  # coloured by liveness, as on Agents
    return Row(
        key=cap.name,
        cells=(
            Text(cap.name),
            Text(f"{online}/{len(cap.agents)}", justify="right",
                 style="red" if not online else ""),
            breaker_counts(cap.agents), Text(str(series.calls), justify="right"),
            Text(str(series.faults), justify="right", style="red" if series.faults else ""),
            in_flight(series.inflight, cap.backlog),
            *(Text(millis(ms), justify="right")
              for ms in (series.p50_ms, series.p95_ms, series.p99_ms)),
            served if cap.agents else Text("no agent declares it", style="red"),
        ),
        fields={"capability": cap.name, "agent": served.plain,
                "breaker": " ".join(a.breaker for a in cap.agents)},
    )


# ---------------------------------------------------------------- learned phrases

PHRASE_COLUMNS = (
    Column("phrase", "Phrase", shrink=24), Column("capability", "Routes to", shrink=14,
                                                  name=True),
    Column("caller", "Taught by", shrink=10), Column("age", "Learned"),
)


def phrase_row(phrase: admin.Phrase, at: float) -> Row:
    """A learned phrase; its age is against the feed's clock, like every other age."""
    return Row(
        key=phrase.key or phrase.text,
        cells=(Text(phrase.text), Text(phrase.capability), Text(phrase.caller or DASH),
               Text(f"{age(at - phrase.learned_at)} ago", justify="right")),
        fields={"phrase": phrase.text, "capability": phrase.capability,
                "caller": phrase.caller},
    )
