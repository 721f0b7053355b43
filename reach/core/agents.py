"""An agent as the coordinator knows it, and the routing groups that find one fast (pure).

``AgentRecord`` is one agent's live record (identity, declared capabilities, liveness,
load, breaker, and the ``ports.AgentLink`` work reaches it through), with what routing weighs
beyond that: its calls in flight per capability under its bulkheads (reach.core.bulkhead), how
far it is into a warm-up (reach.core.warmup) and its success rate over 7 days (``DayRate``).
Each capability keeps its agents in a ``Declared`` of ``Group``s whose ``Shelf``s separate the
agents routing may send work to now (READY) from the busy (FULL, also by a full bulkhead), the
breaker-held (HELD) and the rest, so picking one never scans them all (reach.core.registry).
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

from reach.core import warmup
from reach.core.bulkhead import Bulkheads, plan
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.probes import ProbeState
from reach.core.resilience import Breaker, BreakerState
from reach.core.schemas import Validator
from reach.core.shelf import Shelf
from reach.core.stats import DayRate
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
    node: str | None = None  # the coordinator holding its connection (None: this one)
    connected: bool = True
    draining: bool = False
    # Who stopped new work when ``draining``: "operator" (reach.drain), "agent" (its own
    # deregister: agent.close()), "detach" (reach.detach) or "holder" (its cluster node's word).
    drained_by: str = "operator"
    last_beat: float = 0.0
    registered_at: float = 0.0
    state: Liveness = Liveness.ONLINE
    _inflight: int = 0
    reported_inflight: int = 0
    # Its holder (another node, reach.cluster) refused an attempt for want of a free slot:
    # full here too until the holder reports room again (``Registry.holder_full``).
    held_full: bool = False
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
    # Warm-up: the default period (Settings.warmup, set by the registry; a capability's
    # ``warmup_s`` overrides it) and when the current warm-up began (-inf: never).
    warmup: float = 60.0
    warm_from: float = -math.inf
    # The status ``reshelve`` last saw (READY..OUT, ignoring bulkheads): coming back to READY
    # or FULL from HELD or OUT is a recovery, which starts a warm-up.
    _base: int = field(default=OUT, repr=False)
    # Bulkheads: the limits (None: one pool) planned for ``_planned`` (its capabilities), and
    # the calls in flight per capability and per latency tier they are checked against.
    bulk: Bulkheads | None = field(default=None, repr=False)
    _planned: object = field(default=None, repr=False)
    by_cap: dict[str, int] = field(default_factory=dict, repr=False)
    by_tier: list[int] = field(default_factory=lambda: [0, 0, 0], repr=False)
    # Judged outcomes per capability over 7 days, for the version ``_rated`` (a new version
    # starts with a clean record, as its breaker does).
    days: dict[str, DayRate] = field(default_factory=dict, repr=False)
    _rated: str | None = field(default=None, repr=False)

    @property
    def inflight(self) -> int:
        """Attempts the coordinator has in flight at this agent."""
        return self._inflight

    @inflight.setter
    def inflight(self, value: int) -> None:
        # A slot taken or freed moves the agent between full and ready at once (routing
        # trusts the shelves for slots). A ready, online, connected, closed agent without
        # bulkheads that stays under ``max_concurrency`` stays put: no walk over its groups.
        old, self._inflight = self._inflight, value
        if not self.groups:
            return
        limit = self.max_concurrency
        if (value < limit and old < limit and self._base == READY and self.bulk is None
                and not self.held_full and self.connected and self.state is Liveness.ONLINE
                and self.breaker.state is BreakerState.CLOSED):
            return
        self.reshelve()

    @property
    def reachable(self) -> bool:
        """Online and connected: may be sent new work (breaker and slots permitting)."""
        return self.state is Liveness.ONLINE and self.connected

    def reshelve(self, now: float | None = None) -> None:
        """Put this agent on the right shelf of each of its routing groups. Coming back (to
        READY or FULL from HELD or OUT) starts a warm-up at ``now``, or, when the caller has
        no time at hand (a slot change, a liveness change), at its last beat: the beat that
        brought it back, or the registration."""
        base = routable(self)  # (``_settle``, inline: this runs on every slot change)
        if base <= FULL < self._base:
            self.warm_from = self.last_beat if now is None else now
        self._base = base
        bulk = self.bulk
        for group in self.groups:
            group.place(self, base if bulk is None or base != READY or bulk.room(
                group.capability, self.by_cap, self.by_tier) else FULL)

    def _settle(self, now: float) -> int:
        base = routable(self)
        if base <= FULL < self._base:
            self.warm_from = now
        self._base = base
        return base

    def prepare(self) -> None:
        """Plan the bulkheads of the capabilities just declared, and start a clean 7-day
        record for a new version (once per registration: later calls are a check)."""
        if self._planned is not self.capabilities:
            self._planned = self.capabilities
            self.bulk = plan(self.max_concurrency,
                             {name: cap.spec for name, cap in self.capabilities.items()})
            self.by_tier = [0, 0, 0] if self.bulk is None else self.bulk.tiers(self.by_cap)
        if self._rated != self.version:
            if self._rated is not None:
                self.days.clear()
            self._rated = self.version

    # ------------------------------------------------------------ slots per capability

    def take(self, capability: str) -> None:
        """A call of ``capability`` starts here: one slot of the agent and of its bulkhead."""
        by_cap = self.by_cap
        by_cap[capability] = by_cap.get(capability, 0) + 1
        bulk = self.bulk
        if bulk is not None:
            t = bulk.tier_of.get(capability)
            if t is not None:
                self.by_tier[t] += 1
        self.inflight = self._inflight + 1

    def give(self, capability: str) -> None:
        """A call of ``capability`` ended: its slot is free again."""
        by_cap = self.by_cap
        left = by_cap.get(capability, 0) - 1
        if left > 0:
            by_cap[capability] = left
        else:
            by_cap.pop(capability, None)
        bulk = self.bulk
        if bulk is not None:
            t = bulk.tier_of.get(capability)
            if t is not None and self.by_tier[t] > 0:
                self.by_tier[t] -= 1
        self.inflight = self._inflight - 1

    def room(self, capability: str) -> bool:
        """A free slot for ``capability``: under ``max_concurrency`` and its bulkhead."""
        if self._inflight >= self.max_concurrency or self.held_full:
            return False
        bulk = self.bulk
        return bulk is None or bulk.room(capability, self.by_cap, self.by_tier)

    # ------------------------------------------------------------ warm-up and record

    def warm_span(self, capability: str) -> float:
        """The warm-up period of ``capability`` here: its ``warmup_s``, else the default."""
        cap = self.capabilities.get(capability)
        return self.warmup if cap is None or cap.spec.warmup_s is None else cap.spec.warmup_s

    def warm_share(self, capability: str, now: float) -> float:
        """How far into its warm-up for ``capability`` (reach.core.warmup.share): 0.1 … 1."""
        return warmup.share(now - self.warm_from, self.warm_span(capability))

    def outcome(self, capability: str, ok: bool, now: float) -> None:
        """Count a judged call (success, or a fault of this agent) in the 7-day record."""
        rate = self.days.get(capability)
        if rate is None:
            if len(self.days) >= len(self.capabilities):  # drop what it no longer declares
                for old in [c for c in self.days if c not in self.capabilities]:
                    del self.days[old]
            rate = self.days[capability] = DayRate()
        rate.add(ok, now)

    def trust(self, capability: str, now: float) -> float:
        """The weighted score's reliability factor for ``capability`` (stats.reliability)."""
        rate = self.days.get(capability)
        return 1.0 if rate is None else rate.trust(now)

    def view(self, now: float, p95_ms: float | None = None) -> dict[str, Any]:
        """The AgentView of docs/admin-feed.md (``p95_ms`` comes from the metrics)."""
        b = self.breaker
        warm = min((self.warm_share(c, now) for c in self.capabilities), default=1.0)
        ok = bad = 0
        for rate in self.days.values():
            good, faults = rate.counts(now)
            ok, bad = ok + good, bad + faults
        return {
            "name": self.name, "agent_id": self.agent_id,  # drained: not "suspected", a fault
            "state": "drained" if self.draining and self.state is not Liveness.OFFLINE
            else self.state.value,
            "kind": self.kind, "version": self.version, "inflight": self.inflight,
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
            "drained_by": self.drained_by if self.draining else None,
            "suspected_by": self.suspected_by(now),
            "heartbeat_interval_s": self.liveness.interval,
            "probe": None if self.probe is None else self.probe.view(now),
            "warming": warm < 1.0, "warm_share": round(warm, 3),
            "success_7d": round(ok / (ok + bad), 4) if ok + bad else None,
            "calls_7d": ok + bad,
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


def routable(record: AgentRecord, capability: str | None = None) -> int:
    """READY (may be sent work now), FULL (healthy, no free slot: for ``capability``, none
    under its bulkhead either), HELD (its breaker is not closed: whether it may be sent work
    depends on the time) or OUT (not online)."""
    if record.state is not Liveness.ONLINE or not record.connected:
        return OUT
    if record.breaker.state is not BreakerState.CLOSED:
        return HELD
    if record._inflight >= record.max_concurrency or record.held_full:
        return FULL
    bulk = record.bulk
    if capability is None or bulk is None or bulk.room(capability, record.by_cap,
                                                        record.by_tier):
        return READY
    return FULL


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
    ready: Shelf[AgentRecord] = field(default_factory=Shelf)
    full: Shelf[AgentRecord] = field(default_factory=Shelf)
    held: Shelf[AgentRecord] = field(default_factory=Shelf)
    where: dict[AgentRecord, int] = field(default_factory=dict)
    # The tags its agents declare (part of the group's key): a call asking for tags skips
    # the groups that lack them (reach.core.tags).
    tags: TagSet = field(default_factory=dict)
    # No member is warming past this time (a bound: routing skips warm-up checks after it).
    warm_until: float = -math.inf

    def shelf(self, status: int) -> Shelf[AgentRecord]:
        return self.ready if status == READY else self.full if status == FULL else self.held

    def place(self, record: AgentRecord, status: int | None = None) -> int:
        """Move ``record`` to the shelf its state calls for; returns that status."""
        if status is None:
            status = routable(record, self.capability)
        old = self.where.get(record, OUT)
        if status != old:
            if old != OUT:
                self.shelf(old).remove(record)
            if status == OUT:
                del self.where[record]
            else:
                self.shelf(status).add(record)
                self.where[record] = status
                if status <= FULL < old:  # back among those routing sends work to
                    until = record.warm_from + record.warm_span(self.capability)
                    if until > self.warm_until:
                        self.warm_until = until
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

    # The dict's own views: Mapping's step through ``__getitem__`` for each agent, per submit.
    def values(self) -> ValuesView[AgentRecord]:
        return self.agents.values()

    def items(self) -> ItemsView[str, AgentRecord]:
        return self.agents.items()

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
        record.prepare()
        base = record._settle(record.last_beat)  # (a registration sets last_beat to now)
        group.place(record, base if base != READY else routable(record, self.capability))
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
