"""Result schemas (pure): a capability's declared ``returns``, checked on every result.

Field: "A renamed request field made downstream agents silently read empty values for five
days." A capability may declare what its results look like (``returns``, a JSON schema, as
``params`` is); the coordinator compiles it with the same bounded, no-remote-``$ref``
compiler and limits as ``params`` (reach.core.schemas) and checks every result before the
caller sees it. A result that breaks it is a *fault of the agent that sent it* — counted by
its breaker, retried elsewhere when the capability is idempotent, dead-lettered when nothing
else can answer — so a bad deploy is caught at its first call, not five days downstream.

A capability without ``returns`` pays nothing: no validator is compiled and the dispatcher
takes its unchecked path (one ``is None`` per attempt). For a streaming capability the
schema describes the final ``result`` (by convention the list of chunks): chunks are
forwarded to the caller as they arrive and are not checked one by one.
"""

from __future__ import annotations

from typing import Any

from reach.core.schemas import SchemaError, Validator, compile_schema, violation

__all__ = ["BAD_RESULT", "bad_result", "compile_returns"]

#: The stable code of a result that breaks its capability's ``returns`` schema.
BAD_RESULT = "bad_result"


def compile_returns(schema: dict[str, Any] | None, *, max_bytes: int) -> Validator | None:
    """The validator of a declared ``returns`` schema (None: nothing declared, nothing
    checked); raises ``SchemaError`` naming it a returns schema when it is refused."""
    if schema is None:
        return None
    try:
        return compile_schema(schema, max_bytes=max_bytes)
    except SchemaError as exc:
        raise SchemaError(str(exc).replace("params schema", "returns schema")) from None


def bad_result(validator: Validator | None, result: Any, *, capability: str, agent: str,
               version: str) -> dict[str, Any] | None:
    """None when ``result`` fits the schema (or none is declared), else the wire error of the
    agent's fault: code ``bad_result``, and in ``details`` the agent, its version, the
    capability and ``errors`` (each a JSON ``path`` and a ``message``)."""
    if validator is None:
        return None
    found = violation(validator, result)
    if found is None:
        return None
    path, reason = found
    if reason.startswith("data"):
        reason = "result" + reason[4:]
    return {
        "code": BAD_RESULT,
        "message": f"agent {agent!r} (version {version}) answered {capability!r} with a "
                   f"result that breaks its returns schema at {path}: {reason}",
        "details": {"answer": False, "agent": agent, "version": version,
                    "capability": capability, "errors": [{"path": path, "message": reason}]},
    }
