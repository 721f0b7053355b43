"""Routing (pure): from a capability, params and a caller to one agent, or a typed reason why not.

Candidates are the agents that declare the capability, are online and connected, accept the
params under their own schema, are permitted to this caller, have a breaker that lets the call
through, and have a free slot under ``max_concurrency``. A strategy picks among them.
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from . import names
from .errors import InvalidParams, NoRoute, Unauthorized, Unavailable
from .registry import AgentRecord
from .resilience import BreakerState
from .schemas import check

STRATEGIES = ("weighted", "least_load", "lowest_latency", "round_robin", "random")


@dataclass(frozen=True, slots=True)
class Permissions:
    """Which caller may use which capability: globs like ``sales.*`` or ``scope:read``.

    ``rules=None`` lets everyone use everything. A ``"*"`` entry applies to callers without one.
    """

    rules: Mapping[str, tuple[str, ...]] | None = None

    def allows(self, caller: str, capability: str, scope: str) -> bool:
        if self.rules is None:
            return True
        patterns = self.rules.get(caller, self.rules.get("*", ()))
        for pattern in patterns:
            if pattern.startswith("scope:"):
                if pattern[6:] in (scope, "*"):
                    return True
            elif fnmatch.fnmatchcase(capability, pattern):
                return True
        return False


class Saturated(Exception):
    """Healthy candidates exist but every one is at ``max_concurrency``: wait, then reject."""

    def __init__(self, level: float) -> None:
        super().__init__("all candidates saturated")
        self.level = level


@dataclass(slots=True)
class Router:
    strategy: str = "weighted"
    permissions: Permissions = field(default_factory=Permissions)
    rng: random.Random = field(default_factory=random.Random)
    _turn: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose from {STRATEGIES}")

    def admit(self, capability: str, params: dict[str, object], caller: str,
              declaring: Mapping[str, AgentRecord], known: Iterable[str]) -> None:
        """Checks that do not depend on health: raise NoRoute, InvalidParams or Unauthorized."""
        if not declaring:
            raise NoRoute(
                f"no agent declares {capability!r}; check the name or connect an agent that "
                f"offers it", capability=capability,
                suggestions=names.closest(capability, known))
        scope_ok = valid = False
        reason = ""
        seen: dict[int, str | None] = {}
        for record in declaring.values():
            cap = record.capabilities[capability]
            if not self.permissions.allows(caller, capability, cap.spec.scope):
                continue
            scope_ok = True
            key = id(cap.validator)
            if key not in seen:
                seen[key] = check(cap.validator, params)
            if seen[key] is None:
                valid = True
                break
            reason = seen[key] or reason
        if not scope_ok:
            raise Unauthorized(f"caller {caller!r} may not use {capability!r}",
                               capability=capability, caller=caller)
        if not valid:
            raise InvalidParams(f"params for {capability!r} are invalid: {reason}",
                                capability=capability, reason=reason)

    def pick(self, capability: str, params: dict[str, object], caller: str,
             declaring: Mapping[str, AgentRecord], now: float,
             exclude: frozenset[str] = frozenset(),
             latency: Mapping[str, float] | None = None) -> AgentRecord:
        """Choose one agent, or raise ``Unavailable`` / ``Saturated``.

        When every otherwise fit agent is held back only by an open breaker, the one open the
        longest is chosen as an early half-open probe (the dispatch makes it one): per-agent
        breakers tripping on noise must not add up to an outage of the whole capability, while
        one probe at a time per agent keeps a real outage failing fast."""
        ready: list[AgentRecord] = []
        tripped: AgentRecord | None = None
        healthy = 0
        for record in declaring.values():
            if record.agent_id in exclude or not record.reachable:
                continue
            breaker = record.breaker
            allowed = breaker.allows(now)
            if not allowed and breaker.state is not BreakerState.OPEN:
                continue  # half-open with its probe out
            cap = record.capabilities[capability]
            if not self.permissions.allows(caller, capability, cap.spec.scope):
                continue
            if check(cap.validator, params) is not None:
                continue
            if not allowed:
                if record.inflight < record.max_concurrency and breaker.early_probe(now) and (
                        tripped is None or breaker.opened_at < tripped.breaker.opened_at):
                    tripped = record
                continue
            healthy += 1
            if record.inflight < record.max_concurrency:
                ready.append(record)
        if not ready:
            if healthy:
                raise Saturated(level=1.0)
            if tripped is not None:
                return tripped
            raise Unavailable(
                f"no healthy agent can take {capability!r} now "
                f"({len(declaring)} declare it); retry later or check `reach.agents()`",
                capability=capability)
        if len(ready) == 1:
            return ready[0]
        return self._choose(capability, ready, latency or {})

    def _choose(self, capability: str, ready: list[AgentRecord],
                latency: Mapping[str, float]) -> AgentRecord:
        if self.strategy == "random":
            return self.rng.choice(ready)
        if self.strategy == "round_robin":
            turn = self._turn.get(capability, 0)
            self._turn[capability] = turn + 1
            return sorted(ready, key=lambda r: r.agent_id)[turn % len(ready)]
        if self.strategy == "least_load":
            return min(ready, key=lambda r: r.inflight / (
                r.max_concurrency * r.capabilities[capability].spec.weight))
        if self.strategy == "lowest_latency":
            return min(ready, key=lambda r: latency.get(
                r.agent_id, r.capabilities[capability].spec.latency_ms / 1000.0))
        # weighted: declared weight scaled by free capacity; ties broken at random so equal
        # agents share the work instead of the first one taking it all.
        return max(ready, key=lambda r: (
            r.capabilities[capability].spec.weight * (1.0 - r.inflight / r.max_concurrency),
            self.rng.random()))
