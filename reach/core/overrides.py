"""An operator's hand on routing (pure): weight overrides and pins.

At 3 a.m. an operator may know better than the declared weights: send less to an agent that
is slow after a deploy, or all of a capability to the one agent known to be right. Drain and
breaker reset are all-or-nothing; these two are finer:

- **weight**: replace an agent's declared ``weight`` (for one capability, or for every
  capability it serves) in the weighted and least-load strategies' scores;
- **pin**: route a capability only to the pinned agents. A pin is strict: while a pinned
  agent exists but cannot take the work (suspected, full, breaker open), the capability
  waits or fails as it would with only those agents, rather than quietly going elsewhere —
  the operator pinned it for a reason. Unpinning restores normal routing at once.

Both are kept by agent name (so they survive an agent's reconnect and restart) in memory of
one coordinator, and every change is an admin event (``reach.ops``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ANY = "*"  # a weight for every capability of the agent
MAX_WEIGHT = 1000.0  # as a declared weight (wire.protocol.CapabilitySpec)


@dataclass(slots=True)
class Overrides:
    """Weight overrides by (capability or ``ANY``, agent name) and pins by capability."""

    weights: dict[tuple[str, str], float] = field(default_factory=dict)
    pins: dict[str, frozenset[str]] = field(default_factory=dict)

    def weight(self, capability: str, agent: str, declared: float) -> float:
        """The weight routing uses for ``agent`` on ``capability``: an override for that
        capability, else one for all of the agent's capabilities, else ``declared``."""
        if not self.weights:
            return declared
        found = self.weights.get((capability, agent))
        if found is None:
            found = self.weights.get((ANY, agent))
        return declared if found is None else found

    def set_weight(self, agent: str, weight: float | None, capability: str | None = None
                   ) -> None:
        """Override ``agent``'s weight (``None``: back to what it declared)."""
        key = (ANY if capability is None else capability, agent)
        if weight is None:
            self.weights.pop(key, None)
            return
        if not 0 < weight <= MAX_WEIGHT:
            raise ValueError(f"weight must be in (0, {MAX_WEIGHT:g}], as a declared one; "
                             f"to stop routing to an agent, drain it")
        self.weights[key] = float(weight)

    def pinned(self, capability: str) -> frozenset[str] | None:
        """The agent names ``capability`` is pinned to, or None when it is not pinned."""
        return self.pins.get(capability) if self.pins else None

    def pin(self, capability: str, agent: str) -> frozenset[str]:
        """Add ``agent`` to the agents ``capability`` is routed to only; returns them all."""
        now = self.pins.get(capability, frozenset()) | {agent}
        self.pins[capability] = now
        return now

    def unpin(self, capability: str, agent: str | None = None) -> frozenset[str]:
        """Remove ``agent`` from the pins of ``capability`` (``None``: every pin of it);
        returns the agents still pinned (empty: normal routing)."""
        left = frozenset() if agent is None else self.pins.get(capability, frozenset()) - {agent}
        if left:
            self.pins[capability] = left
        else:
            self.pins.pop(capability, None)
        return left

    def excluded(self, capability: str, names: Iterable[tuple[str, str]]) -> frozenset[str]:
        """Of ``(agent_id, name)`` pairs declaring a pinned ``capability``, the ids routing
        must leave out (every agent not pinned); empty when the capability is not pinned."""
        pinned = self.pinned(capability)
        if pinned is None:
            return frozenset()
        return frozenset(agent_id for agent_id, name in names if name not in pinned)

    def view(self) -> dict[str, Any]:
        """What the admin feed and ``reach.overrides()`` show."""
        return {
            "weights": [{"agent": a, "capability": None if c == ANY else c, "weight": w}
                        for (c, a), w in sorted(self.weights.items(),
                                                key=lambda kv: (kv[0][1], kv[0][0]))],
            "pins": {cap: sorted(agents) for cap, agents in sorted(self.pins.items())},
        }
