"""What ``GET /v1/capabilities`` and ``GET /healthz`` answer, from the registry (pure reads).

A caller sees only the capabilities its call rules let it use (core/trust.py: the same
``Permissions`` routing enforces), each with its params schema and the agents serving it
now, each with the node holding it (with peer links, reach.cluster, a peer's agents are
listed too); a capability that many agents serve lists the first ``MAX_AGENTS`` of them and
counts the rest, so one answer stays bounded however large the fleet.
"""

from __future__ import annotations

from reach.core.liveness import Liveness
from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.server.front_models import AgentOffer, CapabilityList, CapabilityView, Health
from reach.wire.protocol import CapabilitySpec

MAX_AGENTS = 100  # agents listed per capability


def capabilities(caller: str, registry: Registry, trust: Trust, node: str) -> CapabilityList:
    """The capabilities ``caller`` may call; ``node``: this coordinator's node id (the
    ``node`` of its own agents, a peer-held agent's being its holder's)."""
    out = []
    for name in sorted(registry.index):
        declared = registry.index[name]
        records = list(declared.values())
        if not records:  # pragma: no cover — the registry drops a name with its last agent
            continue
        spec = records[0].capabilities[name].spec
        if not trust.calls.allows(caller, name, spec.scope):
            continue
        out.append(CapabilityView(
            name=name, params=spec.params, scope=spec.scope, streaming=spec.streaming,
            idempotent=spec.idempotent, latency_ms=spec.latency_ms, intents=list(spec.intents),
            description=spec.description, agent_count=len(records),
            agents=[AgentOffer(name=r.name, kind=r.kind,
                               state="draining" if r.draining else r.state.value,
                               node=r.node or node)
                    for r in records[:MAX_AGENTS]]))
    return CapabilityList(caller=caller, capabilities=out)


def callable_specs(caller: str, registry: Registry, trust: Trust) -> list[CapabilitySpec]:
    """The declarations of the capabilities ``caller`` may call (the rule above) that an
    agent can take now: connected, not draining, not offline (what the A2A card lists as
    skills: a capability whose agents have all left drops off the card at once)."""
    out = []
    for name in sorted(registry.index):
        records = [r for r in registry.index[name].values()
                   if r.connected and not r.draining and r.state is not Liveness.OFFLINE]
        if records:
            spec = records[0].capabilities[name].spec
            if trust.calls.allows(caller, name, spec.scope):
                out.append(spec)
    return out


def health(accepting: bool, registry: Registry) -> Health:
    return Health(status="ok" if accepting else "stopping", agents=len(registry.by_id),
                  capabilities=len(registry.index))
