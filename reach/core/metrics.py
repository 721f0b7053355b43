"""Call metrics as plain Python objects: per capability, per agent, and in total (pure).

The gateway counts as it goes (a few integer increments per attempt); percentiles are computed
only when somebody reads them. ``reach.metrics()``, the admin feed and the Prometheus endpoint
(``reach.prom``) all read the same numbers.

    calls       attempts dispatched          answers     deliberate TaskError answers
    succeeded   attempts that returned       faults      agent faults, timeouts, lost connections
    retries     retries that send work again, and hedges
    rejections  tasks refused for back-pressure
    fallbacks   tasks answered by their fallback (reach.core.fallback) instead of an agent
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reach.core.stats import Window

WINDOW = 1000  # successful attempts the latency percentiles cover
QUANTILES = (("p50_ms", 0.50), ("p90_ms", 0.90), ("p95_ms", 0.95), ("p99_ms", 0.99))


@dataclass(slots=True)
class Series:
    calls: int = 0
    succeeded: int = 0
    answers: int = 0
    faults: int = 0
    retries: int = 0
    rejections: int = 0
    fallbacks: int = 0
    inflight: int = 0
    latencies: Window = field(default_factory=lambda: Window(WINDOW))  # seconds

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of recent successful latencies, in ms (None before any)."""
        seconds = self.latencies.quantile(q)
        return None if seconds is None else round(seconds * 1000, 3)

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "calls": self.calls, "succeeded": self.succeeded, "answers": self.answers,
            "faults": self.faults, "retries": self.retries, "rejections": self.rejections,
            "fallbacks": self.fallbacks, "inflight": self.inflight}
        for name, q in QUANTILES:
            out[name] = self.quantile(q)
        return out


class Metrics:
    """Counters keyed by capability and by agent name, plus totals."""

    def __init__(self) -> None:
        self.capabilities: dict[str, Series] = {}
        self.agents: dict[str, Series] = {}
        self.totals = Series()

    def _all(self, capability: str, agent: str | None) -> tuple[Series, ...]:
        cap = self.capabilities.get(capability)
        if cap is None:
            cap = self.capabilities[capability] = Series()
        if agent is None:
            return cap, self.totals
        by_agent = self.agents.get(agent)
        if by_agent is None:
            by_agent = self.agents[agent] = Series()
        return cap, by_agent, self.totals

    # ------------------------------------------------------------ counting (gateway)

    def dispatched(self, capability: str, agent: str) -> None:
        for s in self._all(capability, agent):
            s.calls += 1
            s.inflight += 1

    def ended(self, capability: str, agent: str, outcome: str, seconds: float) -> None:
        """One attempt ended with ``outcome`` (ok | answer | anything else is a fault)."""
        for s in self._all(capability, agent):
            s.inflight -= 1
            if outcome == "ok":
                s.succeeded += 1
                s.latencies.add(seconds)
            elif outcome == "answer":
                s.answers += 1
            elif outcome not in ("caller_deadline", "cancelled"):
                s.faults += 1

    def retried(self, capability: str, agent: str | None) -> None:
        for s in self._all(capability, agent):
            s.retries += 1

    def rejected(self, capability: str) -> None:
        for s in self._all(capability, None):
            s.rejections += 1

    def fell_back(self, capability: str) -> None:
        """A task of ``capability`` was answered by its fallback."""
        for s in self._all(capability, None):
            s.fallbacks += 1

    # ------------------------------------------------------------ reading

    def p95_ms(self, agent: str) -> float | None:
        series = self.agents.get(agent)
        return None if series is None else series.quantile(0.95)

    def snapshot(self) -> dict[str, Any]:
        """Everything, JSON-able: the ``Metrics`` object of docs/admin-feed.md."""
        return {"capabilities": {k: s.view() for k, s in sorted(self.capabilities.items())},
                "agents": {k: s.view() for k, s in sorted(self.agents.items())},
                "totals": self.totals.view()}


# The counters of a ``view`` that add up across coordinators (percentiles do not).
COUNTERS = ("calls", "succeeded", "answers", "faults", "retries", "rejections", "fallbacks",
            "inflight")


def combine(nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A cluster's metrics from its nodes' (node id → ``{"totals", "capabilities"}`` as
    ``snapshot`` gives them): the counters summed, in total and per capability, beside each
    node's own. Percentiles stay per node: a cluster-wide P95 is not the sum or the max of
    the nodes' (scrape every node's ``/metrics`` for those)."""
    totals = dict.fromkeys(COUNTERS, 0)
    capabilities: dict[str, dict[str, int]] = {}
    for snap in nodes.values():
        for key in COUNTERS:
            totals[key] += int(snap.get("totals", {}).get(key) or 0)
        for name, view in snap.get("capabilities", {}).items():
            into = capabilities.setdefault(name, dict.fromkeys(COUNTERS, 0))
            for key in COUNTERS:
                into[key] += int(view.get(key) or 0)
    return {"totals": totals, "capabilities": dict(sorted(capabilities.items())),
            "nodes": {n: snap.get("totals", {}) for n, snap in sorted(nodes.items())}}
