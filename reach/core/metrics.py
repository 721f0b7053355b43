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

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from reach.core.stats import Window

WINDOW = 1000  # successful attempts the latency percentiles cover
QUANTILES = (("p50_ms", 0.50), ("p90_ms", 0.90), ("p95_ms", 0.95), ("p99_ms", 0.99))


@dataclass(slots=True)
class Series:
    """The counters and recent latencies of one capability, one agent or all of them: what
    ``view`` shows. ``Metrics`` builds these when read, from its per-(capability, agent)
    records."""

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


class _Record:
    """One (capability, agent) pair's counts (agent None: what no agent took: rejections,
    fallbacks, hedges), and its last ``WINDOW`` successful latencies, each with the number
    of the success coordinator-wide (``seq``) so that any union of records can tell its own
    last ``WINDOW`` exactly."""

    __slots__ = ("calls", "succeeded", "answers", "faults", "retries", "rejections",
                 "fallbacks", "inflight", "seqs", "took")

    def __init__(self) -> None:
        self.calls = self.succeeded = self.answers = self.faults = self.retries = 0
        self.rejections = self.fallbacks = self.inflight = 0
        self.seqs: deque[int] = deque(maxlen=WINDOW)
        self.took: deque[float] = deque(maxlen=WINDOW)


_COUNTED = ("calls", "succeeded", "answers", "faults", "retries", "rejections", "fallbacks",
            "inflight")


def _recent(records: Iterable[_Record]) -> Iterator[float]:
    """The latencies of ``records`` together, newest first (each record's are in order)."""
    tails = [zip(reversed(r.seqs), reversed(r.took), strict=True) for r in records if r.seqs]
    if len(tails) == 1:
        return (took for _, took in tails[0])
    return (took for _, took in heapq.merge(*tails, key=lambda pair: pair[0], reverse=True))


def _series(records: list[_Record]) -> Series:
    """What ``records`` add up to: counters summed, the last ``WINDOW`` latencies of all."""
    out = Series()
    for name in _COUNTED:
        setattr(out, name, sum(getattr(r, name) for r in records))
    newest = list(itertools.islice(_recent(records), WINDOW))
    out.latencies.fill(reversed(newest))
    return out


class Metrics:
    """Counters per (capability, agent): one record updated per event, so an attempt's end
    costs one look-up and a few increments; per capability, per agent and in total they are
    added up when read (``capabilities``, ``agents``, ``totals``, ``snapshot``), with the
    same figures as three separately kept series would give."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str | None], _Record] = {}
        self._of_agent: dict[str, list[_Record]] = {}  # an agent's records (its view's P95)
        self._seq = 0

    def _of(self, capability: str, agent: str | None) -> _Record:
        rec = self._records.get((capability, agent))
        if rec is None:
            rec = self._records[(capability, agent)] = _Record()
            if agent is not None:
                self._of_agent.setdefault(agent, []).append(rec)
        return rec

    # ------------------------------------------------------------ counting (gateway)

    def dispatched(self, capability: str, agent: str) -> None:
        rec = self._records.get((capability, agent)) or self._of(capability, agent)
        rec.calls += 1
        rec.inflight += 1

    def ended(self, capability: str, agent: str, outcome: str, seconds: float) -> None:
        """One attempt ended with ``outcome`` (ok | answer | anything else is a fault)."""
        rec = self._records.get((capability, agent)) or self._of(capability, agent)
        rec.inflight -= 1
        if outcome == "ok":
            rec.succeeded += 1
            self._seq += 1
            rec.seqs.append(self._seq)
            rec.took.append(seconds)
        elif outcome == "answer":
            rec.answers += 1
        elif outcome not in ("caller_deadline", "cancelled"):
            rec.faults += 1

    def retried(self, capability: str, agent: str | None) -> None:
        self._of(capability, agent).retries += 1

    def rejected(self, capability: str) -> None:
        self._of(capability, None).rejections += 1

    def fell_back(self, capability: str) -> None:
        """A task of ``capability`` was answered by its fallback."""
        self._of(capability, None).fallbacks += 1

    # ------------------------------------------------------------ reading

    def _by(self, at: int) -> dict[str, Series]:
        grouped: dict[str, list[_Record]] = {}
        for key, rec in self._records.items():
            name = key[at]
            if name is not None:
                grouped.setdefault(name, []).append(rec)
        return {name: _series(recs) for name, recs in grouped.items()}

    @property
    def capabilities(self) -> dict[str, Series]:
        """Per capability (every capability with a record), built now."""
        return self._by(0)

    @property
    def agents(self) -> dict[str, Series]:
        """Per agent name (every agent with a record), built now."""
        return self._by(1)

    @property
    def totals(self) -> Series:
        """Everything together, built now."""
        return _series(list(self._records.values()))

    def p95_ms(self, agent: str) -> float | None:
        records = self._of_agent.get(agent)
        return None if records is None else _series(records).quantile(0.95)

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
