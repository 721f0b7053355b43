"""An agent as the coordinator knows it, and the routing groups that find one fast (pure).

``AgentRecord`` is one agent's live record (identity, declared capabilities, liveness,
load, breaker, and the ``ports.AgentLink`` work reaches it through). Each capability keeps
its agents in a ``Declared`` of ``Group``s whose ``Shelf``s separate the agents routing may
send work to now (READY) from the busy (FULL), the breaker-held (HELD) and the rest, so
picking one never scans them all. The ``Registry`` (reach.core.registry) keeps them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.probes import ProbeState
from reach.core.resilience import Breaker, BreakerState
from reach.core.schemas import Validator
from reach.core.tags import TagSet, parse
from reach.ports import AgentLink
from reach.wire.protocol import CapabilitySpec

# Where an agent stands for routing (``routable``); one shelf of a ``Group`` per value but OUT.
READY, FULL, HELD, OUT = 0, 1, 2, 3


@dataclass(slots=True)
class Capability:
    """One capability as one agent declared it, with its compiled params validator."""

    name: str
    spec: CapabilitySpec
    validator: Validator
    returns: Validator | None = None  # the declared result schema (reach.core.results)


@dataclass(slots=True, eq=False)
class AgentRecord:
    agent_id: str
    name: str
    version: str
    max_concurrency: int
    capabilities: dict[str, Capability]
    link: AgentLink | None = None  # how work reaches it (None while disconnected)
    instance: str | None = None  # the agent process's own id (Register.instance)
    kind: str = "websocket"  # what carries its work: websocket, http, process, nats
    connected: bool = True
    draining: bool = False
    last_beat: float = 0.0
    registered_at: float = 0.0
    state: Liveness = Liveness.ONLINE
    _inflight: int = 0
    reported_inflight: int = 0
    queue_depth: int = 0
    load: float = 0.0
    calls: int = 0
    faults: int = 0
    breaker: Breaker = field(default_factory=Breaker)
    # The registry's routing groups this agent belongs to (one per declared capability),
    # re-shelved whenever its liveness or in-flight count changes.
    groups: list[Group] = field(default_factory=list, repr=False)
    # When the registry's liveness wheel next looks at this agent (None: it does not).
    due: float | None = field(default=None, repr=False)
    # Its own heartbeat interval and thresholds (the registry sets them at registration).
    liveness: LivenessPolicy = field(default_factory=LivenessPolicy, repr=False)
    # Suspected by its probes (reach.core.probes), beats or not; and their record, if probed.
    probe_held: bool = False
    probe: ProbeState | None = field(default=None, repr=False)

    @property
    def inflight(self) -> int:
        """Attempts the coordinator has in flight at this agent."""
        return self._inflight

    @inflight.setter
    def inflight(self, value: int) -> None:
        # A slot taken or freed moves the agent between full and ready at once: routing
        # trusts the shelves for slots (and re-checks breakers itself, see ``Group``).
        self._inflight = value
        if self.groups:
            self.reshelve()

    @property
    def reachable(self) -> bool:
        """Online and connected: may be sent new work (breaker and slots permitting)."""
        return self.state is Liveness.ONLINE and self.connected

    def reshelve(self) -> None:
        """Put this agent on the right shelf of each of its routing groups."""
        status = routable(self)
        for group in self.groups:
            group.place(self, status)

    def view(self, now: float, p95_ms: float | None = None) -> dict[str, Any]:
        """The AgentView of docs/admin-feed.md (``p95_ms`` comes from the metrics)."""
        b = self.breaker
        return {
            "name": self.name, "agent_id": self.agent_id, "state": self.state.value,
            "kind": self.kind,
            "version": self.version, "inflight": self.inflight,
            "max_concurrency": self.max_concurrency, "load": self.load,
            "queue_depth": self.queue_depth, "calls": self.calls, "faults": self.faults,
            "capabilities": sorted(self.capabilities),
            "breaker": b.state.value,
            "breaker_detail": {
                "state": b.state.value, "fault_rate": round(b.fault_rate(), 3),
                "window": len(b.outcomes), "window_size": b.window,
                "next_probe_in_s": round(max(0.0, b.opened_at + b.open_for - now), 3)
                if b.state.value == "open" else None,
                # Why and since when it is held; the probe goes with the next call after
                # ``probe_after`` (none is sent without one).
                **({"opened_at": b.opened_at, "probe_after": b.opened_at + b.open_for,
                    "tripped_rate": round(b.tripped_rate, 3), "tripped_calls": b.tripped_calls,
                    "probe_failed": b.rested}
                   if b.state is not BreakerState.CLOSED else {})},
            "p95_ms": p95_ms,
            "since_heartbeat_s": round(max(0.0, now - self.last_beat), 3),
            "last_beat": self.last_beat,
            "connected": self.connected, "draining": self.draining,
            "suspected_by": self.suspected_by(now),
            "heartbeat_interval_s": self.liveness.interval,
            "probe": None if self.probe is None else self.probe.view(now),
        }

    def suspected_by(self, now: float) -> str | None:
        """Why a suspected agent is: ``probe`` (its probes were slow), ``disconnected``,
        ``draining`` or ``heartbeat`` (missed beats); None when it is not suspected."""
        if self.state is not Liveness.SUSPECTED:
            return None
        if self.probe_held:
            return "probe"
        if not self.connected:
            return "disconnected"
        return "draining" if self.draining else "heartbeat"


def routable(record: AgentRecord) -> int:
    """READY (may be sent work now), FULL (healthy, no free slot), HELD (its breaker is not
    closed: whether it may be sent work depends on the time) or OUT (not online)."""
    if record.state is not Liveness.ONLINE or not record.connected:
        return OUT
    if record.breaker.state is not BreakerState.CLOSED:
        return HELD
    return READY if record._inflight < record.max_concurrency else FULL


class Shelf:
    """Records in a list, each knowing its position: add, remove and index in O(1)."""

    __slots__ = ("items", "_pos")

    def __init__(self) -> None:
        self.items: list[AgentRecord] = []
        self._pos: dict[AgentRecord, int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, record: object) -> bool:
        return record in self._pos

    def add(self, record: AgentRecord) -> None:
        self._pos[record] = len(self.items)
        self.items.append(record)

    def remove(self, record: AgentRecord) -> None:
        at = self._pos.pop(record)
        last = self.items.pop()
        if last is not record:  # the last one fills the hole
            self.items[at] = last
            self._pos[last] = at


@dataclass(slots=True, eq=False)
class Group:
    """The agents declaring one capability under one scope and one params schema (agents of a
    capability usually share both), shelved by whether routing may send them work now.

    Liveness and slot changes re-shelve an agent at once (the registry and the ``inflight``
    setter do it). Breaker changes are not announced: an agent on ``ready`` or ``full`` whose
    breaker is found not closed is moved to ``held`` by whoever finds it (routing checks
    every agent it considers), and ``held`` is re-checked on every pick, which costs as many
    agents as have an open breaker, not as many as declare the capability."""

    capability: str
    scope: str
    validator: Validator
    members: int = 0
    ready: Shelf = field(default_factory=Shelf)
    full: Shelf = field(default_factory=Shelf)
    held: Shelf = field(default_factory=Shelf)
    where: dict[AgentRecord, int] = field(default_factory=dict)
    # The tags its agents declare (part of the group's key): a call asking for tags skips
    # the groups that lack them (reach.core.tags).
    tags: TagSet = field(default_factory=dict)

    def shelf(self, status: int) -> Shelf:
        return self.ready if status == READY else self.full if status == FULL else self.held

    def place(self, record: AgentRecord, status: int | None = None) -> int:
        """Move ``record`` to the shelf its state calls for; returns that status."""
        if status is None:
            status = routable(record)
        old = self.where.get(record, OUT)
        if status != old:
            if old != OUT:
                self.shelf(old).remove(record)
            if status == OUT:
                del self.where[record]
            else:
                self.shelf(status).add(record)
                self.where[record] = status
        return status


class Declared(Mapping[str, AgentRecord]):
    """The agents declaring one capability: a read-only mapping agent id → record, and the
    routing ``groups`` by (scope, params validator, declared tags)."""

    __slots__ = ("capability", "agents", "groups")

    def __init__(self, capability: str) -> None:
        self.capability = capability
        self.agents: dict[str, AgentRecord] = {}
        self.groups: dict[tuple[str, Validator, frozenset[str]], Group] = {}

    @classmethod
    def of(cls, capability: str, agents: Mapping[str, AgentRecord]) -> Declared:
        """A one-off index over a plain mapping (its records are not told about it)."""
        declared = cls(capability)
        for record in agents.values():
            declared.join(record)
        return declared

    def __getitem__(self, agent_id: str) -> AgentRecord:
        return self.agents[agent_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.agents)

    def __len__(self) -> int:
        return len(self.agents)

    def join(self, record: AgentRecord) -> Group:
        """Add ``record`` (it declares this capability); returns its group, already placed."""
        cap = record.capabilities[self.capability]
        key = (cap.spec.scope, cap.validator, frozenset(cap.spec.tags))
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(self.capability, cap.spec.scope, cap.validator,
                                             tags=parse(cap.spec.tags))
        group.members += 1
        self.agents[record.agent_id] = record
        group.place(record)
        return group

    def leave(self, record: AgentRecord) -> None:
        """Remove ``record``, as it joined (before its capabilities change)."""
        if self.agents.pop(record.agent_id, None) is None:
            return
        cap = record.capabilities[self.capability]
        key = (cap.spec.scope, cap.validator, frozenset(cap.spec.tags))
        group = self.groups[key]
        group.place(record, OUT)
        group.members -= 1
        if not group.members:
            del self.groups[key]
