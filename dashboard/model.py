"""The dashboard's picture of one coordinator, built only from admin feed frames.

Pure state: :meth:`Model.apply` takes a ``snapshot`` or ``delta`` frame (see
docs/admin-feed.md), validates it with the feed's models (:mod:`reach.wire.admin`) and merges
it; nothing here touches a socket, the event loop or the local clock. The time the UI shows
ages against is :attr:`Model.at`, the coordinator's clock from the last frame, so a skewed
local clock does not matter and tests are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from reach.wire import admin

JSON = dict[str, Any]

TRACE_LIMIT = 200
"""How many traces the model keeps: the snapshot's own limit, so deltas cannot grow it."""


class BadFrame(ValueError):
    """A frame that is not a ``snapshot`` or ``delta`` as reach.wire.admin describes them."""


def decode(frame: JSON) -> admin.Snapshot | admin.Delta:
    """A decoded feed frame as its model; :class:`BadFrame` says where it is off."""
    kind = frame.get("type")
    model: type[admin.Snapshot | admin.Delta]
    if kind == "snapshot":
        model = admin.Snapshot
    elif kind == "delta":
        model = admin.Delta
    else:
        raise BadFrame(f"not a snapshot or delta frame: {kind!r}")
    try:
        return model.model_validate(frame)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))[:200] or "frame"
        raise BadFrame(f"invalid {kind} frame: {where}: {first.get('msg')}") from None


class PushLetter(BaseModel):
    """One task notification (an A2A push or a completion webhook, ``kind``) the coordinator
    did not deliver after its tries, as the ``push_dead_letters`` command lists it
    (docs/admin-feed.md §4, docs/a2a.md, docs/webhooks.md). ``node`` is the cluster node that
    keeps it (None: a lone coordinator); ``dead_at`` is its wall clock, like the feed's."""

    model_config = ConfigDict(extra="ignore")

    task_id: str
    config_id: str = ""
    kind: str = "a2a"  # "a2a" (an A2A push) or "webhook" (a task's completion webhook)
    url: str = ""
    reason: str = ""
    dead_at: float = 0.0
    capability: str = ""
    caller: str = ""
    state: str = ""
    node: str | None = None

    @property
    def key(self) -> str:
        """One row per notification: a task has one config per receiver."""
        return f"{self.task_id}/{self.config_id}"


@dataclass(frozen=True)
class CapabilityView:
    """One capability as the feed shows it: its metrics (None before any call) and the
    agents that declare it."""

    name: str
    series: admin.Series | None
    agents: tuple[admin.AgentView, ...]
    backlog: admin.Backlog | None = None  # its tasks waiting their turn, when any


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
        self.coordinator: admin.Coordinator | None = None
        self.agents: dict[str, admin.AgentView] = {}
        self.traces: dict[str, admin.TraceSummary] = {}
        self.dead_letters: dict[str, admin.DeadLetter] = {}
        self.metrics = admin.Metrics()
        self.alerts: list[admin.AlertView] = []  # firing now, oldest first (docs/alerts.md)
        self.overrides = admin.Overrides()  # an operator's weights and pins
        self.frames = 0
        self.found: set[str] = set()
        """Traces the operator went to by id (``g``): kept past the newest 200."""
        self.phrases: dict[str, admin.Phrase] | None = None
        """Intent routing's learned phrases by key, as last read with the ``phrases`` command
        (the feed does not carry them); None until read."""
        self.pushes: dict[str, PushLetter] | None = None
        """The A2A push notifications not delivered, by :attr:`PushLetter.key`, as last read
        with the ``push_dead_letters`` command (the feed does not carry them); None until
        read."""

    # ------------------------------------------------------------ merging

    def apply(self, frame: JSON | admin.Snapshot | admin.Delta) -> Change:
        """Merge one ``snapshot`` or ``delta`` frame, decoded (then validated here) or
        already a model; :class:`BadFrame` for anything else."""
        if isinstance(frame, dict):
            frame = decode(frame)
        if isinstance(frame, admin.Snapshot):
            change = self._apply_snapshot(frame)
        else:
            change = self._apply_delta(frame)
        self.frames += 1
        return change

    def _apply_snapshot(self, frame: admin.Snapshot) -> Change:
        self.at = frame.at
        self.coordinator = frame.coordinator
        self.agents = {a.agent_id: a for a in frame.agents}
        kept = {t: self.traces[t] for t in self.found if t in self.traces}
        self.traces = {**kept, **{t.trace_id: t for t in frame.traces}}
        self.dead_letters = {d.task_id: d for d in frame.dead_letters}
        self.metrics = frame.metrics
        self.alerts = list(frame.alerts)
        self.overrides = frame.overrides
        self._trim_traces()
        return Change(snapshot=True, agents=True, traces=True, dead_letters=True, metrics=True)

    def _apply_delta(self, frame: admin.Delta) -> Change:
        # Ages move with every delta, even an empty one (the once-a-second refresh).
        ticked = frame.at != self.at
        self.at = frame.at
        for view in frame.agents:
            self.agents[view.agent_id] = view
        for summary in frame.traces:
            self.traces[summary.trace_id] = summary
        self._trim_traces()
        for letter in frame.dead_letters:
            self.dead_letters[letter.task_id] = letter
        resolved = [t for t in frame.resolved if t in self.dead_letters]
        for task_id in resolved:
            del self.dead_letters[task_id]
        # The coordinator sends metrics with every delta; a delta built here (a command's
        # returned agent view) has none, and must not blank them.
        metrics = "metrics" in frame.model_fields_set
        if metrics:
            self.metrics = frame.metrics
        if "alerts" in frame.model_fields_set:  # a complete list, like metrics
            self.alerts = list(frame.alerts)
        if "overrides" in frame.model_fields_set:  # complete too
            self.overrides = frame.overrides
        return Change(
            agents=bool(frame.agents) or ticked,
            traces=bool(frame.traces) or ticked,
            dead_letters=bool(frame.dead_letters) or bool(resolved) or ticked,
            metrics=metrics,
            dropped=frame.dropped,
        )

    def add_found(self, summary: admin.TraceSummary) -> None:
        """A trace the operator went to by id: listed (and kept) even if it is old."""
        self.traces[summary.trace_id] = summary
        self.found.add(summary.trace_id)

    def set_phrases(self, phrases: list[admin.Phrase]) -> None:
        """What the ``phrases`` command answered: the whole list, replacing the last one."""
        self.phrases = {p.key or p.text: p for p in phrases}

    def set_pushes(self, letters: list[PushLetter]) -> None:
        """What the ``push_dead_letters`` command answered: the whole list, replacing the last
        one."""
        self.pushes = {letter.key: letter for letter in letters}

    def drop_pushes(self, task_ids: set[str]) -> None:
        """The notifications of these tasks are being sent again: the coordinator took them
        off its list when it answered ``replay_pushes``."""
        if self.pushes is not None:
            self.pushes = {k: v for k, v in self.pushes.items() if v.task_id not in task_ids}

    def _trim_traces(self) -> None:
        if len(self.traces) <= TRACE_LIMIT + len(self.found):
            return
        newest = [t for t in self.traces_newest_first() if t.trace_id not in self.found]
        keep = set(self.found) | {t.trace_id for t in newest[:TRACE_LIMIT]}
        self.traces = {k: t for k, t in self.traces.items() if k in keep}

    # ------------------------------------------------------------ ordered views

    def nodes(self) -> set[str]:
        """The coordinators the agents are held by (this one and its peers, reach.cluster);
        empty from a coordinator without peer links."""
        found = {view.node for view in self.agents.values() if view.node}
        if self.coordinator is not None and self.coordinator.node:
            found.add(self.coordinator.node)
        return found

    def agents_by_name(self) -> list[admin.AgentView]:
        """Every known agent, sorted by name (then id, for two agents of one name)."""
        return sorted(self.agents.values(), key=lambda a: (a.name, a.agent_id))

    def traces_newest_first(self) -> list[admin.TraceSummary]:
        """Traces by start time, newest first."""
        return sorted(self.traces.values(),
                      key=lambda t: (-(t.started_at or 0.0), t.trace_id))

    def letters_oldest_first(self) -> list[admin.DeadLetter]:
        """Unresolved dead letters by the time they died, oldest first."""
        return sorted(self.dead_letters.values(), key=lambda d: (d.dead_since, d.task_id))

    def pushes_oldest_first(self) -> list[PushLetter]:
        """The push notifications not delivered, by when they were given up, oldest first;
        empty before they are read."""
        return sorted((self.pushes or {}).values(), key=lambda d: (d.dead_at, d.key))

    def capabilities(self) -> list[CapabilityView]:
        """Every capability an agent declares or the metrics count, by name, with the agents
        declaring it (by name)."""
        serving: dict[str, list[admin.AgentView]] = {}
        for view in self.agents_by_name():
            for cap in view.capabilities:
                serving.setdefault(cap, []).append(view)
        backlog = self.metrics.backlog
        names = sorted(set(serving) | set(self.metrics.capabilities) | set(backlog))
        return [CapabilityView(name, self.metrics.capabilities.get(name),
                               tuple(serving.get(name, ())), backlog.get(name))
                for name in names]

    def phrases_newest_first(self) -> list[admin.Phrase]:
        """The learned phrases last read, newest first; empty before they are read."""
        return sorted((self.phrases or {}).values(), key=lambda p: (-p.learned_at, p.text))

    def totals(self) -> admin.Series | None:
        """The coordinator-wide metrics series; None until a frame has carried one."""
        return self.metrics.totals if "totals" in self.metrics.model_fields_set else None
