"""Errors over HTTP: Reach's stable codes as RFC 9457 ``application/problem+json`` responses,
and who the caller is (a bearer token, the same trust rules as a websocket caller).

One table says which HTTP status each code answers with (docs/http-api.md repeats it): the
``code`` in the body is the contract, the status is what HTTP tools see. The same code may
answer with two statuses where HTTP draws a line Reach does not: ``unauthorized`` is 401
when the token is missing or unknown (authenticate, then retry) and 403 when the caller is
known but not allowed; ``task_failed`` is 422 for an agent's deliberate answer (final, like a
4xx) and 502 for a fault (the agents failed, attempts exhausted: a dead letter).
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aiohttp import web
from pydantic_core import from_json

from reach.core.trust import Trust
from reach.errors import ProtocolError, ReachError, Unauthorized
from reach.server.front_models import PROBLEM_TYPE, Headers, Problem
from reach.wire.numbers import finite, may_hold_nonfinite, nonfinite_path

PROBLEM_JSON = "application/problem+json"
OPEN_CALLER = "http"  # the caller name in open mode when X-Reach-Caller is not given
STATUS: dict[str, int] = {
    "invalid_params": 422,
    "no_route": 404,
    "unavailable": 503,
    "rejected": 429,
    "unauthorized": 403,
    "timeout": 504,
    "task_failed": 502,
    "protocol_error": 400,
    "cancelled": 409,  # the task was cancelled (DELETE /v1/tasks/{id}) before it ended
}
RETRY_AFTER = {"unavailable": "1", "rejected": "1"}  # seconds, as the Retry-After header


class HttpProblem(Exception):
    """A ``ReachError`` with the HTTP status to answer it with, when the table's is not it."""

    def __init__(self, error: ReachError, status: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status


def status_of(error: Mapping[str, Any]) -> int:
    """The HTTP status of an error object (``ReachError.to_wire()`` or a task's error)."""
    code = str(error.get("code", ""))
    details = error.get("details") or {}
    if code == "task_failed" and isinstance(details, dict) and details.get("answer"):
        return 422
    return STATUS.get(code, 500)


def problem(error: Mapping[str, Any], status: int | None = None, *,
            task_id: str | None = None, trace_id: str | None = None,
            headers: Mapping[str, str] | None = None) -> web.Response:
    """An error object as an ``application/problem+json`` response."""
    code = str(error.get("code") or "reach_error")
    status = status or status_of(error)
    details = error.get("details")
    details = dict(details) if isinstance(details, dict) else {}
    suggestions = details.get("suggestions") if code == "no_route" else None
    body = Problem(
        type=PROBLEM_TYPE + code, title=_title(status), status=status,
        detail=str(error.get("message") or code), code=code, details=details,
        task_id=task_id or _str(details.get("task_id")), trace_id=trace_id,
        suggestions=[str(s) for s in suggestions] if isinstance(suggestions, list) else None)
    out = dict(headers or {})
    if code in RETRY_AFTER and status in (429, 503):
        out.setdefault("Retry-After", RETRY_AFTER[code])
    if status == 401:
        out.setdefault("WWW-Authenticate", 'Bearer realm="reach"')
    return web.Response(status=status, headers=out, content_type=PROBLEM_JSON,
                        text=body.model_dump_json(exclude_none=True))


def refusal(exc: ReachError | HttpProblem, **kw: Any) -> web.Response:
    if isinstance(exc, HttpProblem):
        return problem(exc.error.to_wire(), exc.status, **kw)
    return problem(exc.to_wire(), **kw)


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None: no header); any other
    shape is a 401."""
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise HttpProblem(Unauthorized("the Authorization header must be 'Bearer <token>'"), 401)
    return credentials.strip()


def identify(trust: Trust, authorization: str | None, headers: Headers) -> str:
    """The caller a request speaks for, by the websocket's rules (core/trust.py): with
    tokens, ``Authorization: Bearer <token>`` names a principal, who calls under its own
    name (a ``*`` token may name any caller with ``X-Reach-Caller``); in open mode the
    caller is ``X-Reach-Caller`` (default ``http``) and a token is not needed."""
    token = bearer_token(authorization)
    if trust.open:
        return headers.caller or OPEN_CALLER
    principal = (trust.tokens or {}).get(token or "")
    if principal is None:
        why = "no token given" if token is None else "token not accepted"
        raise HttpProblem(Unauthorized(
            f"{why}: send 'Authorization: Bearer <token>' with the token issued for this "
            f"caller", role="caller"), 401)
    name = headers.caller or principal
    if name == "*":
        raise HttpProblem(Unauthorized(
            "this token may act for any caller: name one with the X-Reach-Caller header",
            role="caller"), 403)
    try:
        trust.authenticate(token, name, "caller")
    except Unauthorized as exc:
        raise HttpProblem(exc, 403) from None
    return name


def bad_json(text: str) -> HttpProblem:
    return HttpProblem(ProtocolError(
        f"the request body is not JSON ({text}); send a JSON object with "
        f"Content-Type: application/json"), 400)


def loads(raw: bytes) -> Any:
    """The body as JSON (empty: an empty object), or a 400 saying where it broke. NaN and
    Infinity are refused, as on the wire, and so are numbers past a double's range (``1e400``
    decodes to inf: it would reach the agent as null), and nesting past the wire's depth."""
    if not raw.strip():
        return {}
    try:
        body = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        raise bad_json(str(exc)) from None
    if may_hold_nonfinite(raw) and not finite(body):  # the walk only when the text asks
        where = nonfinite_path(body) or "the body"
        raise HttpProblem(ProtocolError(
            f"the request body holds a number out of a double's range at {where} (such as "
            f"1e400), which JSON cannot carry (it would arrive as null); send a finite number, "
            f"or the value as a string", field=where), 400)
    return body
