"""Routing (pure): from a capability, params and a caller to one agent, or a typed reason why not.

Candidates are the agents that declare the capability, are online and connected, accept the
params under their own schema, are permitted to this caller, have a breaker that lets the call
through, and have a free slot under ``max_concurrency``. A strategy picks among them.

A pick costs the same at 10 agents as at 10,000: the registry keeps each capability's agents
in groups by (scope, schema) and, within a group, on shelves by whether they may take work now
(``registry.Declared``). Permission and params are checked once per group; only agents whose
breaker is not closed are looked at one by one (their verdict depends on the time). Up to
``exact`` ready agents every one is scored, as the strategy says; past that a few are drawn at
random and the best of them wins (``sample`` of them: the power of two choices), round-robin
walks a cursor, and random draws one. Either way only a fit agent is ever chosen, and
``Unavailable`` / ``Saturated`` / the early probe are decided exactly.

Three things shape a pick beyond the strategy (docs/architecture.md, "Routing"). Bulkheads:
an agent counts as full for a capability whose latency tier holds its share of the agent's
slots (reach.core.bulkhead; the shelves are per capability, so this costs nothing per pick).
Priority headroom: a task below ``shed_below`` may not take the last ``1 − high_water`` of an
agent's slots; finding only such slots it is shed (``Saturated.shed``: rejected at once) while
higher priorities still get through. Warm-up: while any agent of a group warms up (one time
comparison per group tells), candidates are thinned by their warm shares (reach.core.warmup).
In a cluster, of agents a scoring strategy finds equally good, this node's win over another
node's (a peer-link hop); ``random`` and ``round_robin`` spread on purpose, left alone.
The weighted score also multiplies by each agent's 7-day reliability (``AgentRecord.trust``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from reach.core import names, reasons, warmup
from reach.core import tags as tagging
from reach.core.agents import FULL, HELD, READY, AgentRecord, Declared, Group, routable
from reach.core.overrides import Overrides
from reach.core.permissions import Permissions as Permissions  # (re-exported: trust.py)
from reach.core.resilience import BreakerState
from reach.core.schemas import Validator, check
from reach.errors import InvalidParams, NoRoute, Unauthorized, Unavailable

STRATEGIES = ("weighted", "least_load", "lowest_latency", "round_robin", "random")


class Saturated(Exception):
    """Healthy candidates exist but every one is at ``max_concurrency``: wait, then reject.
    ``shed``: the only free slots are kept for higher priorities; reject at once."""

    def __init__(self, level: float, shed: bool = False) -> None:
        super().__init__("all candidates saturated")
        self.level, self.shed = level, shed


@dataclass(slots=True)
class Router:
    strategy: str = "weighted"
    permissions: Permissions = field(default_factory=Permissions)
    overrides: Overrides = field(default_factory=Overrides)  # an operator's weights and pins
    rng: random.Random = field(default_factory=random.Random)
    # Up to this many ready agents (plus those excluded), each is scored; past it, ``sample``
    # drawn at random are (two choices already spread load almost as well as all of them).
    exact: int = 8
    sample: int = 2
    # Priority headroom: below ``shed_below``, a task may use an agent's slots only up to
    # ``ceil(max_concurrency × high_water)``; the rest is kept for higher priorities.
    high_water: float = 0.8
    shed_below: int = 5
    # Agents ``pick`` looked at, in total: the cost of routing, counted for tests and benches.
    examined: int = 0
    _turn: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose from {STRATEGIES}")
        if self.exact < 0 or self.sample < 1:
            raise ValueError("need exact >= 0 and sample >= 1")
        if not 0.0 < self.high_water <= 1.0:
            raise ValueError(f"high_water must be in (0, 1], not {self.high_water!r}")

    def may_call(self, caller: str, declaring: Callable[[str], Declared]
                 ) -> Callable[[str], bool] | None:
        """Whether ``caller`` may call a capability (some group of the agents ``declaring``
        it lets it); None when no call rules are configured (everyone may call anything)."""
        if self.permissions.rules is None:
            return None
        allows = self.permissions.allows
        return lambda cap: any(allows(caller, cap, g.scope)
                               for g in declaring(cap).groups.values())

    def admit(self, capability: str, params: dict[str, object], caller: str,
              declaring: Mapping[str, AgentRecord],
              known: names.NameIndex | Iterable[str],
              tags: tagging.Wanted | None = None, typed: str | None = None) -> None:
        """Checks that do not depend on health: raise NoRoute, InvalidParams or Unauthorized.

        ``known`` (the names ``NoRoute`` suggests from) is normally the registry's
        ``NameIndex``; any other iterable is compared name by name. With ``tags``, only groups
        declaring them count; none does: ``NoRoute`` with the tags that are declared.
        ``typed`` is the name as the caller wrote it, for the message."""
        if not declaring:
            suggestions = (known.closest(capability) if isinstance(known, names.NameIndex)
                           else names.closest(capability, known))
            raise NoRoute(reasons.no_route(capability, typed, suggestions),
                          capability=capability, suggestions=suggestions)
        scope_ok = valid = False
        reason = ""
        seen: dict[Validator, str | None] = {}
        untagged: list[Group] = []
        allows = None if self.permissions.rules is None else self.permissions.allows  # open
        for group in _indexed(capability, declaring).groups.values():
            if allows and not allows(caller, capability, group.scope):
                continue
            scope_ok = True
            if tags and not tagging.matches(group.tags, tags):
                untagged.append(group)
                continue
            if group.validator not in seen:
                seen[group.validator] = check(group.validator, params)
            verdict = seen[group.validator]
            if verdict is None:
                valid = True
                break
            reason = verdict or reason
        if not scope_ok:
            raise Unauthorized(f"caller {caller!r} may not use {capability!r}",
                               capability=capability, caller=caller)
        if tags and not seen:  # every permitted group lacks the tags
            offered = tagging.available((g.tags for g in untagged), tags)
            raise NoRoute(
                f"no agent declares {capability!r} with tags {tagging.describe(tags)}; "
                f"declared: {', '.join(offered) or 'no such tag'}", capability=capability,
                tags=dict(tags), available=offered, suggestions=[])
        if not valid:
            raise InvalidParams(f"params for {capability!r} are invalid: {reason}",
                                capability=capability, reason=reason)

    def pick(self, capability: str, params: dict[str, object], caller: str,
             declaring: Mapping[str, AgentRecord], now: float,
             exclude: frozenset[str] = frozenset(),
             latency: Mapping[str, float] | None = None,
             tags: tagging.Wanted | None = None, priority: int = 9) -> AgentRecord:
        """Choose one agent, or raise ``Unavailable`` / ``Saturated``.

        A ``priority`` below ``shed_below`` does not get an agent's reserved headroom; when
        that is all that is free, ``Saturated`` says ``shed``.

        When every otherwise fit agent is held back only by an open breaker, the one open the
        longest (ties: the lowest agent id) is chosen as an early half-open probe (the dispatch
        makes it one): per-agent breakers tripping on noise must not add up to an outage of the
        whole capability, while one probe at a time per agent keeps a real outage failing fast.

        ``declaring`` is normally the registry's ``Declared`` index; any other mapping is
        indexed for this one call (which costs a pass over it). With ``tags``, only groups
        declaring them are candidates (fail-over and hedges pass the same tags)."""
        index = declaring if isinstance(declaring, Declared) else _indexed(capability, declaring)
        groups = self._fit(capability, params, caller, index, tags)
        if self.overrides.pins:  # pinned: every other agent is left out, as if excluded
            exclude = exclude | self.overrides.excluded(
                capability, ((r.agent_id, r.name) for r in index.agents.values()))
        found = _Found(now, exclude, priority < self.shed_below, self.high_water)
        for group in groups:
            if group.warm_until > now:
                found.warming = True
            if group.held.items:
                for record in group.held.items[:]:
                    found.held(group, record)
        ready = self._ready(capability, groups, found)
        if not ready and not found.healthy:
            # Saturated or unavailable: one full agent that is still fit decides it.
            for group in groups:
                for record in group.full.items[:]:
                    if found.check(group, record):  # a slot opened without a re-shelve
                        found.extra.append(record)
                    if found.healthy or found.extra:
                        break
                if found.healthy or found.extra:
                    break
            ready = found.extra
        self.examined += found.examined
        if not ready:
            if found.healthy:
                raise Saturated(level=1.0, shed=found.spare)
            if found.tripped is not None:
                return found.tripped
            pinned = self.overrides.pinned(capability)
            if pinned is not None:
                raise Unavailable(
                    f"{capability!r} is pinned to {', '.join(sorted(pinned))} by an operator, "
                    f"and none of them can take it now; unpin it to route to the others",
                    capability=capability, pinned=sorted(pinned))
            raise Unavailable(reasons.none_can(capability, index.agents.values(), now),
                              capability=capability)
        if len(ready) == 1:
            return ready[0]
        if found.warming:
            ready = warmup.thin(ready, [r.warm_share(capability, now) for r in ready], self.rng)
            if len(ready) == 1:
                return ready[0]
        return self._choose(capability, ready, latency or {}, now)

    def _fit(self, capability: str, params: dict[str, object], caller: str,
             index: Declared, tags: tagging.Wanted | None) -> list[Group]:
        """The groups this caller may use, declaring ``tags``, whose schema accepts the
        params."""
        fit: list[Group] = []
        seen: dict[Validator, bool] = {}
        allows = None if self.permissions.rules is None else self.permissions.allows  # open
        for group in index.groups.values():
            if allows and not allows(caller, capability, group.scope):
                continue
            if tags and not tagging.matches(group.tags, tags):
                continue
            ok = seen.get(group.validator)
            if ok is None:
                ok = seen[group.validator] = check(group.validator, params) is None
            if ok:
                fit.append(group)
        return fit

    def _ready(self, capability: str, groups: list[Group], found: _Found) -> list[AgentRecord]:
        """Ready agents to choose from: all of them when few, else a drawn handful."""
        shelves = [g for g in groups if g.ready.items]
        sizes = [len(g.ready.items) for g in shelves]
        total = sum(sizes)
        extra = found.extra
        n_extra = len(extra)
        if total + n_extra <= self.exact + len(found.exclude):
            return self._every(shelves, found)
        # (Two when some are warming, so that thinning has a choice to make.)
        want = 1 if self.strategy in ("random", "round_robin") and not found.warming \
            else self.sample
        cursor = None
        if self.strategy == "round_robin":
            cursor = self._turn.get(capability, 0)
            self._turn[capability] = cursor + 1
        # The shelves' sizes are counted once, and again only after a miss (a drawn agent
        # that moved shelves, or joined ``extra``): a pick from a fleet draws twice.
        total += n_extra
        drawn: list[AgentRecord] = []
        got = misses = 0
        rand = self.rng.random
        while got < want and total:
            if cursor is None:
                at = int(rand() * total)  # (randrange: 3 calls more)
            else:
                at, cursor = cursor % total, cursor + 1
            if at < n_extra:
                drawn.append(extra[at])
                got += 1
                continue
            at -= n_extra
            for group, size in zip(shelves, sizes, strict=True):
                if at >= size:
                    at -= size
                    continue
                record = group.ready.items[at]
                if found.check(group, record):
                    drawn.append(record)
                    got += 1
                    break
                misses += 1
                # Excluded or stale agents keep being drawn: past a few, score everyone
                # (which also re-shelves every stale one, so this stays rare).
                if misses > 4 + 2 * len(found.exclude):
                    return drawn + [r for r in self._every(shelves, found) if r not in drawn]
                n_extra = len(extra)
                sizes = [len(g.ready.items) for g in shelves]
                total = sum(sizes) + n_extra
                break
        return drawn

    @staticmethod
    def _every(shelves: list[Group], found: _Found) -> list[AgentRecord]:
        ready = [r for g in shelves for r in g.ready.items[:] if found.check(g, r)]
        return ready + found.extra

    def _choose(self, capability: str, ready: list[AgentRecord],
                latency: Mapping[str, float], now: float) -> AgentRecord:
        if self.strategy == "random":
            return self.rng.choice(ready)
        if self.strategy == "round_robin":
            turn = self._turn.get(capability, 0)
            self._turn[capability] = turn + 1
            return sorted(ready, key=lambda r: r.agent_id)[turn % len(ready)]
        key = self._key(capability, latency, now)
        best = min(ready, key=key)
        if best.node is None:  # this node's own (always, outside a cluster): one test a pick
            return best
        # Another node's: an attempt there rides a peer link (a hop each way), so an agent of
        # this node the strategy finds exactly as good goes first (only a tie: a clearly
        # better agent elsewhere still wins).
        near = min((r for r in ready if r.node is None), key=key, default=best)
        return near if key(near)[0] == key(best)[0] else best

    def _key(self, capability: str, latency: Mapping[str, float], now: float
             ) -> Callable[[AgentRecord], tuple[float, float]]:
        """The strategy's order: the lowest key wins."""
        weight = self.overrides.weight
        if self.strategy == "least_load":
            return lambda r: (r.inflight / (r.max_concurrency * weight(
                capability, r.name, r.capabilities[capability].spec.weight)), 0.0)
        if self.strategy == "lowest_latency":
            return lambda r: (latency.get(  # undeclared (None), unobserved: taken as 1 s
                r.agent_id, (r.capabilities[capability].spec.latency_ms or 1e3) / 1e3), 0.0)
        # weighted: declared (or an operator's) weight scaled by free capacity and by the
        # 7-day reliability (1.0 unless the agent failed more than 1 % of 20+ calls); ties
        # broken at random so equal agents share the work instead of the first one taking it.
        rng = self.rng
        return lambda r: (
            -weight(capability, r.name, r.capabilities[capability].spec.weight)
            * (1.0 - r.inflight / r.max_concurrency)
            * (r.days[capability].trust(now) if capability in r.days else 1.0), rng.random())


def _indexed(capability: str, declaring: Mapping[str, AgentRecord]) -> Declared:
    if isinstance(declaring, Declared):
        return declaring
    return Declared.of(capability, declaring)


class _Found:
    """What one pick learned while looking at agents, beyond the ready ones it drew."""

    __slots__ = ("now", "exclude", "limited", "high_water", "extra", "healthy", "spare",
                 "tripped", "examined", "warming")

    def __init__(self, now: float, exclude: frozenset[str], limited: bool,
                 high_water: float) -> None:
        self.now, self.exclude = now, exclude
        self.limited = limited  # below shed_below: an agent's slots past high_water are not
        self.high_water = high_water  # for this pick
        self.extra: list[AgentRecord] = []  # breaker not closed, yet letting calls through
        self.healthy = False  # some fit agent lets calls through but has no free slot
        self.spare = False  # ... and some of those have slots, kept for higher priorities
        self.tripped: AgentRecord | None = None  # the early-probe choice so far
        self.examined = 0
        self.warming = False  # some group of the capability has an agent warming up

    def moved(self, group: Group, record: AgentRecord, status: int) -> None:
        """Re-shelve an agent found on the wrong shelf, in all its groups (noticing that it is
        back, which starts its warm-up now) and in this one (which a one-off index's records
        do not know)."""
        record.reshelve(self.now)
        group.place(record, status)

    def reserved(self, record: AgentRecord) -> bool:
        """Whether the agent's free slots are all headroom this pick may not use (asked only
        by a pick below ``shed_below``)."""
        if record.inflight < math.ceil(record.max_concurrency * self.high_water - 1e-9):
            return False
        self.healthy = self.spare = True
        return True

    def check(self, group: Group, record: AgentRecord) -> bool:
        """Is this agent (from ``ready`` or ``full``) ready and not excluded? One found on the
        wrong shelf is moved (its breaker changed since) and counted where it belongs."""
        self.examined += 1
        status = routable(record, group.capability)
        if group.where.get(record) != status:
            self.moved(group, record, status)
            if status == HELD:
                self.held(group, record, checked=True)
                return False
        if record.agent_id in self.exclude:
            return False
        if status == FULL:
            self.healthy = True
        return status == READY and (not self.limited or not self.reserved(record))

    def held(self, group: Group, record: AgentRecord, checked: bool = False) -> None:
        """An agent whose breaker is not closed: a candidate, a full one, an early-probe
        candidate, or nothing now (half-open with its probe out)."""
        if not checked:  # (``check`` found it there and moved it already)
            self.examined += 1
            status = routable(record, group.capability)
            if status != HELD:  # its breaker closed since: back on ready or full, warming
                self.moved(group, record, status)
                return
        if record.agent_id in self.exclude:
            return
        breaker = record.breaker
        capability = group.capability
        if breaker.allows(self.now):
            if not record.room(capability):
                self.healthy = True
            elif not self.limited or not self.reserved(record):
                self.extra.append(record)
            return
        if breaker.state is not BreakerState.OPEN:
            return  # half-open with its probe out
        if record.room(capability) and breaker.early_probe(self.now):
            best = self.tripped
            if best is None or (breaker.opened_at, record.agent_id) < (
                    best.breaker.opened_at, best.agent_id):
                self.tripped = record
