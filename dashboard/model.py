"""The dashboard's picture of one coordinator, built only from admin feed frames.

Pure state: :meth:`Model.apply` takes a decoded ``snapshot`` or ``delta`` frame (see
docs/admin-feed.md) and merges it; nothing here touches a socket, the event loop or the local
clock. The time the UI shows ages against is :attr:`Model.at`, the coordinator's clock from
the last frame, so a skewed local clock does not matter and tests are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

TRACE_LIMIT = 200
"""How many traces the model keeps: the snapshot's own limit, so deltas cannot grow it."""


@dataclass(frozen=True)
class Change:
    """What one frame changed, so the UI re-syncs only the tables that need it."""

    snapshot: bool = False
    agents: bool = False
    traces: bool = False
    dead_letters: bool = False
    metrics: bool = False
    dropped: int = 0

    @property
    def any(self) -> bool:
        return self.snapshot or self.agents or self.traces or self.dead_letters or self.metrics


class Model:
    """Agents, traces, dead letters and metrics as the feed last described them."""

    def __init__(self) -> None:
        self.at: float = 0.0
        self.coordinator: JSON = {}
        self.agents: dict[str, JSON] = {}
        self.traces: dict[str, JSON] = {}
        self.dead_letters: dict[str, JSON] = {}
        self.metrics: JSON = {}
        self.frames = 0

    # ------------------------------------------------------------ merging

    def apply(self, frame: JSON) -> Change:
        """Merge one ``snapshot`` or ``delta`` frame; ``ValueError`` for any other type."""
        kind = frame.get("type")
        if kind == "snapshot":
            change = self._apply_snapshot(frame)
        elif kind == "delta":
            change = self._apply_delta(frame)
        else:
            raise ValueError(f"not a snapshot or delta frame: {kind!r}")
        self.frames += 1
        return change

    def _apply_snapshot(self, frame: JSON) -> Change:
        self.at = float(frame.get("at") or self.at)
        self.coordinator = dict(frame.get("coordinator") or {})
        self.agents = {a["agent_id"]: a for a in frame.get("agents") or []}
        self.traces = {t["trace_id"]: t for t in frame.get("traces") or []}
        self.dead_letters = {d["task_id"]: d for d in frame.get("dead_letters") or []}
        self.metrics = dict(frame.get("metrics") or {})
        self._trim_traces()
        return Change(snapshot=True, agents=True, traces=True, dead_letters=True, metrics=True)

    def _apply_delta(self, frame: JSON) -> Change:
        at = frame.get("at")
        # Ages move with every delta, even an empty one (the once-a-second refresh).
        ticked = at is not None and float(at) != self.at
        if at is not None:
            self.at = float(at)
        agents = frame.get("agents") or []
        for view in agents:
            self.agents[view["agent_id"]] = view
        traces = frame.get("traces") or []
        for summary in traces:
            self.traces[summary["trace_id"]] = summary
        self._trim_traces()
        letters = frame.get("dead_letters") or []
        for letter in letters:
            self.dead_letters[letter["task_id"]] = letter
        resolved = [t for t in frame.get("resolved") or [] if t in self.dead_letters]
        for task_id in resolved:
            del self.dead_letters[task_id]
        metrics = frame.get("metrics")
        if metrics is not None:
            self.metrics = dict(metrics)
        return Change(
            agents=bool(agents) or ticked,
            traces=bool(traces) or ticked,
            dead_letters=bool(letters) or bool(resolved) or ticked,
            metrics=metrics is not None,
            dropped=int(frame.get("dropped") or 0),
        )

    def _trim_traces(self) -> None:
        if len(self.traces) <= TRACE_LIMIT:
            return
        keep = self.traces_newest_first()[:TRACE_LIMIT]
        self.traces = {t["trace_id"]: t for t in keep}

    # ------------------------------------------------------------ ordered views

    def agents_by_name(self) -> list[JSON]:
        """Every known agent, sorted by name (then id, for two agents of one name)."""
        return sorted(self.agents.values(), key=lambda a: (a.get("name", ""), a["agent_id"]))

    def traces_newest_first(self) -> list[JSON]:
        """Traces by start time, newest first."""
        return sorted(self.traces.values(),
                      key=lambda t: (-(t.get("started_at") or 0.0), t["trace_id"]))

    def letters_oldest_first(self) -> list[JSON]:
        """Unresolved dead letters by the time they died, oldest first."""
        return sorted(self.dead_letters.values(),
                      key=lambda d: (d.get("dead_since") or 0.0, d["task_id"]))

    def totals(self) -> JSON:
        """The coordinator-wide metrics series (empty before the first frame)."""
        totals = self.metrics.get("totals")
        return totals if isinstance(totals, dict) else {}
