"""Bulkheads (pure): slow work cannot take every slot of an agent that also serves fast work.

FIELD: "A 30 s one-size timeout: a 40 s analysis agent filled the caller's thread pool, 200 ms
calls died too" → "timeout classes (fast / normal / long), isolated pools"; "40 s feature jobs
starved an 8-thread shared pool" → "bulkheads by expected duration".

Each capability falls in a latency *tier* by its declared ``latency_ms``: fast (≤ 1 s), normal
(≤ 10 s) or long. When an agent's capabilities span ``T`` ≥ 2 tiers, each tier may hold at most
``max_concurrency − (T − 1) × reserve`` of its slots, ``reserve = max(1, max_concurrency //
(2T))``: every other tier always keeps ``reserve`` slots. A capability may also declare a
``max_concurrency`` of its own, a limit on top of its tier's. An agent serving one tier with no
declared limits has no bulkheads (one slot pool, as before). Example: ``max_concurrency=8``,
``report.build`` (40 s, long) and ``price.get`` (200 ms, fast): T = 2, reserve = 2, each tier
may hold 6 slots, so six 40 s reports leave two slots free for prices, and a burst of prices
leaves two for reports. With ``max_concurrency`` < T no slot can be set aside; each tier's
limit is then 1 and only the agent's total binds.
"""

from __future__ import annotations

from collections.abc import Mapping

from reach.wire.protocol import CapabilitySpec

TIERS = ("fast", "normal", "long")
FAST_MS = 1000.0  # at most this declared latency: the fast tier
NORMAL_MS = 10_000.0  # at most this: normal; above it: long


def tier(latency_ms: float | None) -> int:
    """The index in ``TIERS`` of a capability declaring ``latency_ms``; one that declares no
    latency is ``normal`` (its timeout starts at ``default_timeout``, 30 s, docs/protocol.md §8)."""
    if latency_ms is None:
        return 1
    if latency_ms <= FAST_MS:
        return 0
    return 1 if latency_ms <= NORMAL_MS else 2


def tier_limit(max_concurrency: int, tiers: int) -> int:
    """The slots one tier may hold when an agent's capabilities span ``tiers`` tiers."""
    if tiers < 2:
        return max_concurrency
    reserve = max(1, max_concurrency // (2 * tiers))
    return max(1, max_concurrency - (tiers - 1) * reserve)


class Bulkheads:
    """One agent's limits: capability → tier, each tier's limit, declared capability limits.

    The counts they are checked against live in the agent's record (``AgentRecord.by_cap``,
    ``by_tier``), so a re-registration can plan new limits while calls are in flight."""

    __slots__ = ("tier_of", "tier_limits", "cap_limits")

    def __init__(self, tier_of: dict[str, int], tier_limits: list[int],
                 cap_limits: dict[str, int]) -> None:
        self.tier_of = tier_of
        self.tier_limits = tier_limits
        self.cap_limits = cap_limits

    def room(self, capability: str, by_cap: Mapping[str, int], by_tier: list[int]) -> bool:
        """Whether one more call of ``capability`` fits its tier's and its own limit."""
        t = self.tier_of.get(capability)
        if t is not None and by_tier[t] >= self.tier_limits[t]:
            return False
        limit = self.cap_limits.get(capability)
        return limit is None or by_cap.get(capability, 0) < limit

    def tiers(self, by_cap: Mapping[str, int]) -> list[int]:
        """Calls in flight per tier, from the calls in flight per capability."""
        counts = [0] * len(TIERS)
        for cap, n in by_cap.items():
            t = self.tier_of.get(cap)
            if t is not None:
                counts[t] += n
        return counts


def plan(max_concurrency: int, specs: Mapping[str, CapabilitySpec]) -> Bulkheads | None:
    """The bulkheads of an agent declaring ``specs`` (None: one pool, nothing to check)."""
    tier_of = {name: tier(spec.latency_ms) for name, spec in specs.items()}
    declared = {name: spec.max_concurrency for name, spec in specs.items()
                if spec.max_concurrency is not None and spec.max_concurrency < max_concurrency}
    used = set(tier_of.values())
    if len(used) < 2 and not declared:
        return None
    each = tier_limit(max_concurrency, len(used))
    return Bulkheads(tier_of, [each if t in used else max_concurrency
                               for t in range(len(TIERS))], declared)
