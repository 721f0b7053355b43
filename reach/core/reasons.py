"""Why no agent can take a capability now, in words a remote caller can act on (pure).

"None is online; see `reach.agents()`" told a remote client about a method it does not have,
and called a drained agent "not online". This says, per agent, what holds it back: drained by
an operator (or stopped by itself), suspected (with how long since its last heartbeat),
offline, disconnected, its breaker open, or all of its slots busy.
"""

from __future__ import annotations

from collections.abc import Iterable

from reach.core.agents import AgentRecord
from reach.core.liveness import Liveness
from reach.core.resilience import BreakerState

SHOWN = 5  # agents named per reason; past it, "and N more"
# A draining agent, by who stopped its new work: an agent that closed itself is not one an
# operator drained (the operator would look for a drain to undo that is not there).
DRAINED = {
    "operator": "drained by an operator",
    "agent": "stopped by itself (it deregistered: agent.close())",
    "detach": "being detached (reach.detach)",
    "holder": "draining at the node that holds its connection",
}


def holdup(record: AgentRecord, now: float) -> str:
    """What keeps ``record`` from new work, or "" when nothing does."""
    if record.draining:
        return DRAINED.get(record.drained_by, "draining")
    if not record.connected:
        return "disconnected"
    if record.state is Liveness.OFFLINE:
        return "offline"
    if record.probe_held:
        return "suspected by its probes (it beats, but its probes are slow)"
    if record.state is Liveness.SUSPECTED:
        return f"suspected (no heartbeat for {max(0.0, now - record.last_beat):.1f} s)"
    if record.breaker.state is BreakerState.OPEN:
        return "breaker open"
    if record.breaker.state is BreakerState.HALF_OPEN and record.breaker.probing:
        return "breaker half-open (its probe call is out)"
    if record.inflight >= record.max_concurrency:
        return f"busy ({record.inflight}/{record.max_concurrency} slots)"
    return ""


def none_can(capability: str, records: Iterable[AgentRecord], now: float) -> str:
    """One sentence: which agents declare ``capability`` and what holds each back."""
    by_reason: dict[str, list[str]] = {}
    count = 0
    for record in sorted(records, key=lambda r: r.name):
        count += 1
        reason = holdup(record, now)
        if reason:
            by_reason.setdefault(reason, []).append(record.name)
    parts = []
    for reason, agents in by_reason.items():
        more = f" and {len(agents) - SHOWN} more" if len(agents) > SHOWN else ""
        parts.append(f"{', '.join(agents[:SHOWN])}{more} {reason}")
    held = "; ".join(parts) if parts else "each is busy or being probed"
    return (f"{count} agent(s) declare {capability!r} but none can take it now: {held}; "
            f"retry shortly")


def no_route(capability: str, typed: str | None, suggestions: list[str]) -> str:
    """What the caller asked for (as typed, and as read when that differs) and the closest
    names: "did you mean" belongs in the message, not only in ``details``."""
    asked = repr(capability) if typed in (None, capability) else \
        f"{typed!r} (read as {capability!r})"
    if suggestions:
        return (f"no agent declares {asked}; did you mean "
                f"{' or '.join(repr(s) for s in suggestions[:3])}?")
    return f"no agent declares {asked}; check the name or connect an agent that offers it"

