"""Rich display in notebooks: ``Reach``, agent lists and traces render as HTML (``_repr_html_``).

The values stay plain (lists of dicts) so scripts and tests use them as before; only their
notebook rendering is added. Everything is escaped: agent names and errors are user data.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

_STATE_COLOUR = {"online": "#2e7d32", "suspected": "#f9a825", "offline": "#c62828",
                 "drained": "#00838f",
                 "closed": "#2e7d32", "half_open": "#f9a825", "open": "#c62828"}
_PHASE_COLOUR = {"queued": "#90a4ae", "delivered": "#64b5f6", "processing": "#1e88e5",
                 "retry": "#ffb300", "done": "#43a047"}


def _cell(value: Any) -> str:
    return f"<td>{escape('' if value is None else str(value))}</td>"


def _badge(text: str) -> str:
    colour = _STATE_COLOUR.get(text, "#616161")
    return f'<td><span style="color:{colour};font-weight:bold">{escape(text)}</span></td>'


def _table(head: list[str], rows: list[str]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def agents_html(agents: Iterable[dict[str, Any]]) -> str:
    rows = []
    for a in agents:
        rows.append(
            "<tr>" + _cell(a["name"]) + _badge(a["state"])
            + _cell(f"{a['inflight']}/{a['max_concurrency']}") + _cell(a.get("p95_ms"))
            + _cell(a["faults"]) + _badge(a["breaker"]) + _cell(a["since_heartbeat_s"])
            + _cell(", ".join(a["capabilities"])) + "</tr>")
    if not rows:
        return "<p><i>no agents connected</i></p>"
    return _table(["agent", "state", "in flight", "P95 ms", "faults", "breaker",
                   "since beat s", "capabilities"], rows)


class AgentList(list[dict[str, Any]]):
    """``reach.agents()``: a list of agent views that renders as a table in a notebook."""

    def _repr_html_(self) -> str:
        return agents_html(self)


def timeline_html(timeline: dict[str, Any]) -> str:
    hops = timeline["hops"]
    if not hops:
        return f"<p><i>no tasks in trace {escape(timeline['trace_id'])}</i></p>"
    t0 = min(h["start"] for h in hops)
    t1 = max((h["end"] if h["end"] is not None else h["start"]) for h in hops)
    span = max(t1 - t0, 1e-6)
    rows = []
    for h in hops:
        end = h["end"] if h["end"] is not None else t1
        left = (h["start"] - t0) / span * 100
        width = max((end - h["start"]) / span * 100, 0.4)
        colour = "#e53935" if h["failed"] else _PHASE_COLOUR.get(h["phase"], "#9e9e9e")
        bar = (f'<div style="position:relative;height:12px;width:320px;background:#eceff1">'
               f'<div style="position:absolute;left:{left:.2f}%;width:{width:.2f}%;'
               f'height:12px;background:{colour}"></div></div>')
        label = "&nbsp;" * 2 * h["depth"] + escape(h["capability"])
        ms = "" if h["duration_ms"] is None else f"{h['duration_ms']:.1f}"
        rows.append(f"<tr><td>{label}</td>{_cell(h['phase'])}{_cell(h['agent'])}"
                    f"{_cell(ms)}<td>{bar}</td>{_cell(h['note'])}</tr>")
    return (f"<p>trace <code>{escape(timeline['trace_id'])}</code>, "
            f"{len(timeline['tasks'])} task(s)</p>"
            + _table(["capability", "phase", "agent", "ms", "timeline", "note"], rows))


class TraceView(list[dict[str, Any]]):
    """``reach.trace(id)``: the chain's ordered events; ``.timeline`` holds the tasks and the
    per-hop timings (docs/admin-feed.md, "Timeline")."""

    def __init__(self, events: Iterable[dict[str, Any]], timeline: dict[str, Any]) -> None:
        super().__init__(events)
        self.timeline = timeline

    @property
    def hops(self) -> list[dict[str, Any]]:
        return list(self.timeline["hops"])

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return list(self.timeline["tasks"])

    def _repr_html_(self) -> str:
        return timeline_html(self.timeline)


def reach_html(url: str, running: bool, agents: list[dict[str, Any]], live: int, dead: int
               ) -> str:
    """A coordinator in a notebook: where it listens, what it holds, and its agents."""
    state = "running" if running else "stopped"
    head = (f"<p><b>Agent-Reach</b> at <code>{escape(url)}</code> ({state}): "
            f"{len(agents)} agent(s), {live} task(s) in flight, {dead} dead letter(s)</p>")
    return head + agents_html(agents)
