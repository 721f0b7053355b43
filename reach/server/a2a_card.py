"""Reach's A2A Agent Card: one skill per capability the caller may call (pure conversions).

The card is built for each request from the registry (``front_views.callable_specs``, the
rule ``GET /v1/capabilities`` follows), so it follows agents as they come and go and shows
each caller only what its call rules let it use. A skill's id and name are the capability's
name, its description the capability's, its tags the declared tags plus ``read``/``write``
(scope) and ``streaming`` when it streams, its examples the declared intents (what intent
routing matches a text part against).

JSON-RPC over HTTP at the A2A base URL (``reach.a2a_url``), listed twice: protocol 1.0 (what
current clients pick) and 0.3 (the card then also carries the 0.3 fields, ``url`` and
``preferredTransport``, and the dispatcher answers 0.3 method names); streaming and push
notifications on (``a2a_push``). With tokens, the card declares HTTP bearer
authentication (``Authorization: Bearer TOKEN``, the front door's check).
"""

from __future__ import annotations

from collections.abc import Iterable

from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import (
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    TransportProtocol,
)

from reach._version import __version__
from reach.wire.protocol import CapabilitySpec

NAME = "agent-reach"
DESCRIPTION = ("A coordinator of agents: each skill is a capability one or more agents "
               "serve, called with retries, timeouts and trust rules. Send a data part "
               "{\"capability\": SKILL_ID, \"params\": {...}}, or text naming the work.")
JSON = "application/json"
TEXT = "text/plain"
BEARER = "bearer"  # the security scheme's name when the coordinator has tokens


def skill(spec: CapabilitySpec) -> pb.AgentSkill:
    """The skill for one capability."""
    tags = [*spec.tags, spec.scope]
    if spec.streaming:
        tags.append("streaming")
    return pb.AgentSkill(id=spec.name, name=spec.name,
                         description=spec.description or f"the capability {spec.name}",
                         tags=tags, examples=list(spec.intents),
                         input_modes=[JSON, TEXT], output_modes=[JSON])


def card(specs: Iterable[CapabilitySpec], url: str, tokens: bool = False) -> pb.AgentCard:
    """The card served at ``<url>/.well-known/agent-card.json``; ``url`` is the A2A base;
    ``tokens``: the coordinator wants a bearer token (declared as the ``bearer`` scheme)."""
    out = pb.AgentCard(
        name=NAME, description=DESCRIPTION, version=__version__,
        supported_interfaces=[pb.AgentInterface(
            url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=v)
            for v in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)],
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=[JSON, TEXT], default_output_modes=[JSON],
        skills=[skill(s) for s in specs])
    if tokens:
        out.security_schemes[BEARER].http_auth_security_scheme.scheme = "Bearer"
        out.security_requirements.add().schemes[BEARER].SetInParent()
    return out
