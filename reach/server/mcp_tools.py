"""Reach capabilities as MCP tools, and Reach outcomes as MCP results (pure conversions).

A tool is a capability the caller may call: its name, description, input schema = the
params schema, output schema = ``returns`` (when it describes an object, as MCP requires),
annotations from scope and idempotency. A ``TaskError`` answer is a tool result with
``is_error``; any other failure is a JSON-RPC error whose ``data`` carries Reach's error
(``data["code"]`` is Reach's stable code; docs/mcp.md).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.wire.protocol import CapabilitySpec

IDEMPOTENCY_META = "agent-reach/idempotency-key"  # the _meta key a retried call repeats
SERVER_ERROR = -32000  # JSON-RPC "server error": Reach's own code is in data["code"]
INVALID_PARAMS = -32602


def tool(spec: CapabilitySpec) -> types.Tool:
    """The MCP tool for one capability."""
    params = spec.params if spec.params.get("type") == "object" else {
        "type": "object", **spec.params}
    returns = spec.returns if (spec.returns or {}).get("type") == "object" else None
    return types.Tool(
        name=spec.name, description=spec.description or None, input_schema=params,
        output_schema=returns,
        annotations=types.ToolAnnotations(read_only_hint=spec.scope == "read",
                                          destructive_hint=spec.scope == "write",
                                          idempotent_hint=spec.idempotent,
                                          open_world_hint=True))


# The one tool that is not a capability: call whatever capability words name (intent routing,
# docs/intent.md). Capability names are dotted, so an underscore never clashes with one.
INTENT_TOOL = "reach_intent"


def intent_tool() -> types.Tool:
    """The intent tool: ``intent`` routed to a capability; a refusal lists the closest ones
    and the words that matched, and ``choose`` picks one (the phrase is then learned)."""
    return types.Tool(
        name=INTENT_TOOL,
        description="Call whatever capability these words describe (Chinese or English). "
                    "When no capability clearly fits, the answer lists the closest ones "
                    "(suggestions, candidates) and the words that matched each (why): call "
                    "again with the same intent and choose set to one of them.",
        input_schema={"type": "object", "required": ["intent"], "properties": {
            "intent": {"type": "string", "maxLength": 2000},
            "params": {"type": "object"},
            "choose": {"type": "string", "description": "one of a refusal's suggestions"}}},
        annotations=types.ToolAnnotations(open_world_hint=True))


def refusal(error: dict[str, Any]) -> types.CallToolResult:
    """An intent nobody clearly fits, as a result the model can read and act on."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(error.get("message", "")))],
        structured_content={"error": error}, is_error=True)


def specs(caller: str, registry: Registry, trust: Trust) -> list[CapabilitySpec]:
    """The capabilities ``caller`` may call, by name (the REST ``/v1/capabilities`` rule)."""
    out = []
    for name in sorted(registry.index):
        records = list(registry.index[name].values())
        if not records:  # pragma: no cover — the registry drops a name with its last agent
            continue
        spec = records[0].capabilities[name].spec
        if trust.calls.allows(caller, name, spec.scope):
            out.append(spec)
    return out


Fingerprint = dict[str, tuple[str, str]]
"""A tool set as list_changed compares it: capability name → (scope, declaration JSON)."""


def fingerprint(registry: Registry) -> Fingerprint:
    """What a tool list depends on (names and declarations): list_changed fires when this
    changes, not on every liveness flutter."""
    out: Fingerprint = {}
    for name in sorted(registry.index):
        records = list(registry.index[name].values())
        if records:
            spec = records[0].capabilities[name].spec
            out[name] = (spec.scope, spec.model_dump_json(
                include={"params", "returns", "scope", "idempotent", "description"}))
    return out


def changed(before: Fingerprint, after: Fingerprint) -> dict[str, str]:
    """The capabilities that came, went or changed declaration between two tool sets, with
    the scope each had (a caller is told only of those it may call)."""
    return {name: (after.get(name) or before[name])[0]
            for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def success(result: Any) -> types.CallToolResult:
    """A succeeded task's result: JSON text, and structured content when it is an object."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(result))],
        structured_content=result if isinstance(result, dict) else None)


def failure(error: dict[str, Any]) -> types.CallToolResult:
    """A ``TaskError`` answer as a tool result the model can read (``is_error``); a fault
    raises the JSON-RPC error instead."""
    details = error.get("details") or {}
    if not details.get("answer"):
        raise fault(error)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(error.get("message", "")))],
        structured_content={"error": error}, is_error=True)


def fault(error: dict[str, Any]) -> MCPError:
    """The JSON-RPC error for a Reach error (its wire form in ``data``)."""
    code = INVALID_PARAMS if error.get("code") == "invalid_params" else SERVER_ERROR
    return MCPError(code, str(error.get("message", "the call failed")), error)
