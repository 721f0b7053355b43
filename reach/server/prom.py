"""``GET /metrics``: the coordinator's metrics in the Prometheus text format.

prometheus_client writes the format; a collector reads the gateway's metrics and the registry
at scrape time, so nothing on the hot path knows Prometheus exists. Each coordinator has its own
``CollectorRegistry`` (no global state: two coordinators in one process never mix numbers).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from reach.core.metrics import QUANTILES, Series
from reach.core.registry import Registry
from reach.gateway.gateway import Gateway

__all__ = ["CONTENT_TYPE_LATEST", "Exporter"]

_COUNTERS = (
    ("calls", "attempts dispatched"),
    ("succeeded", "attempts that returned a result"),
    ("answers", "deliberate TaskError answers"),
    ("faults", "agent faults, timeouts and lost connections"),
    ("retries", "retries and hedges started"),
    ("rejections", "tasks refused for back-pressure"),
    ("fallbacks", "tasks answered by their fallback instead of an agent"),
)
_BREAKER_VALUE = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


class _Collector:
    def __init__(self, gateway: Gateway, registry: Registry) -> None:
        self._gateway = gateway
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        gateway = self._gateway
        metrics = gateway.metrics
        for label, table in (("capability", metrics.capabilities), ("agent", metrics.agents)):
            yield from _series_families(label, table)
        states = GaugeMetricFamily("reach_agents", "known agents by liveness state",
                                   labels=["state"])
        counts = {"online": 0, "suspected": 0, "offline": 0}
        breaker = GaugeMetricFamily(
            "reach_agent_breaker_state", "per-agent breaker: 0 closed, 1 half-open, 2 open",
            labels=["agent"])
        # The info convention: join on `agent` to label any series with the agent's kind.
        info = GaugeMetricFamily("reach_agent_info", "one per known agent: what carries its "
                                 "work (kind: websocket, http, process, nats) and its version",
                                 labels=["agent", "kind", "version"])
        for record in self._registry.by_id.values():
            counts[record.state.value] += 1
            breaker.add_metric([record.name], _BREAKER_VALUE[record.breaker.state.value])
            info.add_metric([record.name, record.kind, record.version], 1.0)
        for state, n in counts.items():
            states.add_metric([state], n)
        yield states
        yield breaker
        yield info
        yield GaugeMetricFamily("reach_tasks_live", "tasks accepted and not yet ended",
                                value=len(gateway.live))
        yield GaugeMetricFamily("reach_dead_letters", "unresolved dead letters",
                                value=len(gateway.dead))
        depth = GaugeMetricFamily("reach_backlog", "accepted tasks waiting their turn for a "
                                  "free slot or an agent, per capability", labels=["capability"])
        oldest = GaugeMetricFamily("reach_backlog_oldest_seconds", "age of the oldest task "
                                   "waiting its turn (since its submit), per capability",
                                   labels=["capability"])
        for cap, (waiting, age) in sorted(gateway.book.backlog.view(gateway.clock.wall()).items()):
            depth.add_metric([cap], waiting)
            oldest.add_metric([cap], age)
        yield depth
        yield oldest


def _series_families(label: str, table: dict[str, Series]) -> Iterator[Metric]:
    for name, help_text in _COUNTERS:
        family = CounterMetricFamily(f"reach_{label}_{name}", f"{help_text}, per {label}",
                                     labels=[label])
        for key, series in table.items():
            family.add_metric([key], getattr(series, name))
        yield family
    inflight = GaugeMetricFamily(f"reach_{label}_inflight", f"attempts in flight, per {label}",
                                 labels=[label])
    latency = GaugeMetricFamily(
        f"reach_{label}_latency_seconds",
        f"latency of the last successful attempts, per {label} and quantile",
        labels=[label, "quantile"])
    for key, series in table.items():
        inflight.add_metric([key], series.inflight)
        for _, q in QUANTILES:
            ms = series.quantile(q)
            if ms is not None:
                latency.add_metric([key, str(q)], ms / 1000.0)
    yield inflight
    yield latency


class Exporter:
    """Renders one coordinator's metrics for a scrape."""

    def __init__(self, gateway: Gateway, registry: Registry) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(gateway, registry))

    def render(self) -> bytes:
        return generate_latest(self._registry)
