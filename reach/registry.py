"""The registry: who is connected, what they declare, how alive and how busy they are.

Pure bookkeeping (times come in as arguments); the channel feeds it frames' contents and the
gateway reads candidates from it. Capabilities are indexed, so finding the agents for one
capability never scans every agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import names
from .liveness import Liveness, LivenessPolicy, judge
from .protocol import CapabilitySpec
from .resilience import Breaker
from .schemas import Validator, compile_schema


@dataclass(slots=True)
class Capability:
    """One capability as one agent declared it, with its compiled params validator."""

    name: str
    spec: CapabilitySpec
    validator: Validator


@dataclass(slots=True, eq=False)
class AgentRecord:
    agent_id: str
    name: str
    version: str
    max_concurrency: int
    capabilities: dict[str, Capability]
    session: Any = None  # the channel's connection object; opaque here
    instance: str | None = None  # the agent process's own id (Register.instance)
    connected: bool = True
    draining: bool = False
    last_beat: float = 0.0
    registered_at: float = 0.0
    state: Liveness = Liveness.ONLINE
    inflight: int = 0
    reported_inflight: int = 0
    queue_depth: int = 0
    load: float = 0.0
    calls: int = 0
    faults: int = 0
    breaker: Breaker = field(default_factory=Breaker)

    @property
    def reachable(self) -> bool:
        """Online and connected: may be sent new work (breaker and slots permitting)."""
        return self.state is Liveness.ONLINE and self.connected

    def view(self, now: float, p95_ms: float | None = None) -> dict[str, Any]:
        """The AgentView of docs/admin-feed.md (``p95_ms`` comes from the metrics)."""
        b = self.breaker
        return {
            "name": self.name, "agent_id": self.agent_id, "state": self.state.value,
            "version": self.version, "inflight": self.inflight,
            "max_concurrency": self.max_concurrency, "load": self.load,
            "queue_depth": self.queue_depth, "calls": self.calls, "faults": self.faults,
            "capabilities": sorted(self.capabilities),
            "breaker": b.state.value,
            "breaker_detail": {
                "state": b.state.value, "fault_rate": round(b.fault_rate(), 3),
                "window": len(b.outcomes), "window_size": b.window,
                "next_probe_in_s": round(max(0.0, b.opened_at + b.open_for - now), 3)
                if b.state.value == "open" else None},
            "p95_ms": p95_ms,
            "since_heartbeat_s": round(max(0.0, now - self.last_beat), 3),
            "last_beat": self.last_beat,
            "connected": self.connected, "draining": self.draining,
        }


@dataclass(slots=True)
class Registration:
    record: AgentRecord
    normalized: list[str]
    warnings: list[str]


class Registry:
    """Agents by id and name, and an index capability → agents declaring it."""

    def __init__(self, policy: LivenessPolicy, breaker_open_for: float = 5.0) -> None:
        self.policy = policy
        self.breaker_open_for = breaker_open_for
        self.by_id: dict[str, AgentRecord] = {}
        self.by_name: dict[str, AgentRecord] = {}
        self.index: dict[str, dict[str, AgentRecord]] = {}
        # Told of every registration and liveness change (the coordinator publishes events).
        self.on_change: Callable[[AgentRecord], None] | None = None

    # ------------------------------------------------------------ membership

    def register(self, *, agent_id: str, name: str, version: str, max_concurrency: int,
                 specs: list[CapabilitySpec], session: Any, now: float,
                 instance: str | None = None) -> Registration:
        """Add or refresh an agent. Raises ``SchemaError``/``ValueError`` on a bad declaration."""
        caps: dict[str, Capability] = {}
        warnings: list[str] = []
        # Look-alikes are judged against other agents' names, not this agent's previous ones.
        others = [c for c, agents in self.index.items() if agents.keys() - {agent_id}]
        for spec in specs:
            canonical = names.normalize(spec.name)
            if canonical in caps:
                raise ValueError(f"capability {spec.name!r} is declared twice (as {canonical!r})")
            if canonical != spec.name:
                warnings.append(f"capability {spec.name!r} registered as {canonical!r}")
            for other in names.look_alikes(canonical, [*others, *caps]):
                warnings.append(
                    f"capability {canonical!r} looks like existing {other!r}; callers asking "
                    f"for one will not reach the other")
            caps[canonical] = Capability(canonical, spec, compile_schema(spec.params))
        record = self.by_id.get(agent_id)
        if record is None:
            record = AgentRecord(agent_id=agent_id, name=name, version=version,
                                 max_concurrency=max_concurrency, capabilities=caps)
            record.breaker.open_for = self.breaker_open_for
            self.by_id[agent_id] = record
        else:
            # Same identity coming back (reconnect or restart): keep its counters and breaker,
            # unless it comes back as another version: a fixed deploy starts with a clean
            # breaker instead of waiting out the faults of the code it replaced.
            self._unindex(record)
            if version != record.version:
                record.breaker.reset()
            record.name, record.version = name, version
            record.max_concurrency, record.capabilities = max_concurrency, caps
        record.session, record.connected, record.draining = session, True, False
        record.instance = instance
        record.last_beat = record.registered_at = now
        self._set(record, now)
        self.by_name[name] = record
        for cap in caps:
            self.index.setdefault(cap, {})[agent_id] = record
        if self.on_change is not None:
            self.on_change(record)
        return Registration(record, list(caps), warnings)

    def _unindex(self, record: AgentRecord) -> None:
        for cap in record.capabilities:
            agents = self.index.get(cap)
            if agents is not None:
                agents.pop(record.agent_id, None)
                if not agents:
                    del self.index[cap]

    def heartbeat(self, record: AgentRecord, now: float, *, inflight: int, queue_depth: int,
                  load: float) -> Liveness | None:
        """Record a beat; returns the new state if it changed."""
        record.last_beat = now
        record.reported_inflight, record.queue_depth, record.load = inflight, queue_depth, load
        return self._set(record, now)

    def disconnected(self, record: AgentRecord, now: float) -> Liveness | None:
        record.connected = False
        record.session = None
        return self._set(record, now)

    def deregister(self, record: AgentRecord, now: float) -> Liveness | None:
        record.draining = True
        return self._set(record, now)

    def undrain(self, record: AgentRecord, now: float) -> Liveness | None:
        record.draining = False
        return self._set(record, now)

    def sweep(self, now: float) -> list[tuple[AgentRecord, Liveness]]:
        """Re-judge every agent; returns those whose state changed."""
        changed = []
        for record in self.by_id.values():
            if self._set(record, now) is not None:
                changed.append((record, record.state))
        return changed

    def _set(self, record: AgentRecord, now: float) -> Liveness | None:
        new = judge(self.policy, last_beat=record.last_beat, now=now,
                    connected=record.connected, draining=record.draining)
        if new is record.state:
            return None
        record.state = new
        if self.on_change is not None:
            self.on_change(record)
        return new

    # ------------------------------------------------------------ queries

    def declaring(self, capability: str) -> dict[str, AgentRecord]:
        return self.index.get(capability, {})

    def capability_names(self) -> list[str]:
        return sorted(self.index)

    def intents(self) -> dict[str, list[str]]:
        """capability → the example intents its agents declared."""
        out: dict[str, list[str]] = {}
        for cap, agents in self.index.items():
            phrases: list[str] = []
            for record in agents.values():
                spec = record.capabilities[cap].spec
                phrases.extend(p for p in spec.intents if p not in phrases)
                if spec.description and spec.description not in phrases:
                    phrases.append(spec.description)
            out[cap] = phrases
        return out
