"""What ``GET /v1/capabilities`` and ``GET /healthz`` answer, from the registry (pure reads).

A caller sees only the capabilities its call rules let it use (core/trust.py: the same
``Permissions`` routing enforces), each with its params schema and the agents serving it
now, each with the node holding it (with peer links, reach.cluster, a peer's agents are
listed too); a capability that many agents serve lists the first ``MAX_AGENTS`` of them and
counts the rest, so one answer stays bounded however large the fleet.
"""

from __future__ import annotations

from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.server.front_models import AgentOffer, CapabilityList, CapabilityView, Health

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


def health(accepting: bool, registry: Registry) -> Health:
    return Health(status="ok" if accepting else "stopping", agents=len(registry.by_id),
                  capabilities=len(registry.index))
