"""What a handler's run comes to, as the agent answers it: ``("ok", result)`` or ``("error",
wire error dict)`` (reach.sdk.serving caches, shares and sends them)."""

from __future__ import annotations

from typing import Any

from reach.wire.numbers import RULE, nonfinite_path

Outcome = tuple[str, Any]  # ("ok", result) | ("error", wire error dict)


def not_json(what: str, value: Any, agent: str) -> Outcome:
    """A handler's result (or chunk) holding NaN or an infinity: the agent's fault, said now
    (JSON has no such numbers: sent, they would reach the caller as null)."""
    where = nonfinite_path(value, what) or what
    return error("task_failed", f"{where}: {RULE}", answer=False, agent=agent,
                 type="ValueError")


def error(code: str, message: str, /, **details: Any) -> Outcome:
    """An error outcome: its wire code, message and details (``answer``: final for the
    task, or a fault another attempt may retry)."""
    return ("error", {"code": code, "message": message, "details": details})
