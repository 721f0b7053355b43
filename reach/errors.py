"""One exception tree for everything Agent-Reach raises to its users.

    ReachError          code
    ├── NoRoute         no_route        nobody declares the capability (carries suggestions)
    ├── Unavailable     unavailable     declared, but no healthy agent right now
    ├── Rejected        rejected        quota / back-pressure (carries a level 0..1)
    ├── InvalidParams   invalid_params  params do not match the capability's schema
    ├── Unauthorized    unauthorized    bad or missing token, or caller not permitted
    ├── TaskFailed      task_failed     the task ended in error (carries the remote error)
    │   └── TaskError                   a handler's deliberate answer: final, never retried
    ├── ReachTimeout    timeout         no answer within the deadline (also a TimeoutError)
    ├── Cancelled       cancelled       the task was cancelled (by its caller or an operator)
    └── ProtocolError   protocol_error  a malformed, unknown, oversize or wrong-version frame

Every error has a stable ``code`` (sent on the wire) and a message that says what to do next.
``from_wire`` rebuilds the right class on the other side of a connection.
"""

from __future__ import annotations

from typing import Any


class ReachError(Exception):
    """Base of every Agent-Reach error; ``code`` is stable and travels on the wire."""

    code: str = "reach_error"

    def __init__(self, message: str, /, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able form carried by ``error`` frames."""
        return {"code": self.code, "message": self.message, "details": self.details}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class NoRoute(ReachError):
    """No agent declares the capability; ``suggestions`` lists the closest known names. For
    an intent that two capabilities fit about as well, ``candidates`` names the two."""

    code = "no_route"

    @property
    def suggestions(self) -> list[str]:
        return list(self.details.get("suggestions", []))

    @property
    def candidates(self) -> list[str]:
        return list(self.details.get("candidates", []))

    @property
    def why(self) -> dict[str, list[str]]:
        """For an intent: per candidate or suggestion, the request's words that matched it."""
        return {str(k): list(v) for k, v in dict(self.details.get("why") or {}).items()}


class Unavailable(ReachError):
    """The capability is declared, but no healthy, permitted agent can take it now."""

    code = "unavailable"


class Rejected(ReachError):
    """Back-pressure: every candidate is saturated; ``level`` (0..1) says how hard to slow down."""

    code = "rejected"

    @property
    def level(self) -> float:
        return float(self.details.get("level", 1.0))


class InvalidParams(ReachError):
    """The params do not validate against the capability's JSON schema; nothing was delivered."""

    code = "invalid_params"


class Unauthorized(ReachError):
    """Missing or wrong token, or the caller is not permitted to use the capability."""

    code = "unauthorized"


class TaskFailed(ReachError):
    """The task ended in error. ``details`` has the facts at the top, as a ``TaskError``'s
    does (``agent``, ``answer``: false for a fault, and the agent's own details such as
    ``type`` or ``exit_code``); ``remote`` holds the agent's whole error (code, message,
    details, origin agent)."""

    code = "task_failed"

    @property
    def remote(self) -> dict[str, Any]:
        return dict(self.details.get("remote", {}))


class TaskError(TaskFailed):
    """Raise this in a handler to give a deliberate error answer (like HTTP 4xx).

    It is final: never retried and not held against the agent's breaker. Callers receive it
    as a ``TaskError`` too (a subclass of ``TaskFailed``).
    """

    def __init__(self, message: str, /, **details: Any) -> None:
        details.setdefault("answer", True)
        super().__init__(message, **details)


class ReachTimeout(ReachError, TimeoutError):
    """No answer within the deadline. Also a ``TimeoutError`` so ``except TimeoutError`` works."""

    code = "timeout"


class Cancelled(ReachError):
    """The task was cancelled before it ended (``handle.cancel()``, ``DELETE
    /v1/tasks/{id}``, an operator): its agent was told to stop; ``details.by`` says who."""

    code = "cancelled"


class ProtocolError(ReachError):
    """A frame was malformed, unknown, oversize or of an unsupported version."""

    code = "protocol_error"


_BY_CODE: dict[str, type[ReachError]] = {
    cls.code: cls
    for cls in (NoRoute, Unavailable, Rejected, InvalidParams, Unauthorized, TaskFailed,
                ReachTimeout, Cancelled, ProtocolError)
}


def from_wire(payload: dict[str, Any]) -> ReachError:
    """Rebuild a typed error from the ``error`` field of a frame."""
    code = str(payload.get("code", "reach_error"))
    message = str(payload.get("message", code))
    details = payload.get("details") or {}
    if code == "task_failed" and details.get("answer"):
        return TaskError(message, **details)
    cls = _BY_CODE.get(code, ReachError)
    err = cls(message, **details)
    if cls is ReachError:
        err.code = code
    return err
