"""The REST door's edge: what every request meets before and after its route.

- A body refused from its headers alone is never read: any ``Content-Encoding`` but
  ``identity`` (415: nothing is inflated) or a declared length over ``max_frame_bytes`` (413).
  Once an answer is decided with the body unread, the connection is closed, not drained.
- Each caller holds at most its share of the door's requests (``hold``), so one caller's
  streams and long polls cannot make everyone else's calls 503.
- Every refusal is problem+json; no stack trace reaches the peer.

Connections themselves (first-head timeout, per-address and total caps) are the ``Gate``'s
(``front_guard``); ``FrontDoor`` (``front``) owns one ``Edge`` and installs ``middleware``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from reach.config import Settings
from reach.core import counts
from reach.errors import ProtocolError, ReachError, Rejected
from reach.server.front_guard import Gate
from reach.server.front_problems import HttpProblem, problem, refusal

log = logging.getLogger("reach.front")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HOLDER = web.RequestKey("reach.holder", str)  # the caller whose request slot this request holds


class Edge:
    """Bounds and errors for every route of one front door (no global state)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.inflight = 0  # requests being answered (bounded by max_connections)
        self.holding: dict[str, int] = {}  # caller → its requests being answered (its share)
        self.gate = Gate(settings)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Bodies refused from their headers alone, each caller within its share of the
        requests (``hold``), every refusal as problem+json, never a stack trace to the peer;
        a body left unread closes its connection."""
        self.gate.started(request.transport)
        try:
            refused = _unread(request, self.settings.max_frame_bytes)
            response = refused if refused is not None else await self._bounded(request,
                                                                               handler)
            if not request.content.is_eof():
                response.force_close()  # the answer is decided: the rest is not read
            return response
        finally:
            self.gate.answered(request.transport)

    async def _bounded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # (No request count to check here: a connection carries one request at a time and
        # the gate admits at most max_connections, answering 503 past them.)
        self.inflight += 1
        try:
            return await handler(request)
        except (ReachError, HttpProblem) as exc:
            return refusal(exc)
        except web.HTTPException as exc:  # aiohttp's own: unknown route, method, body size
            if exc.status < 400:
                raise
            detail = _http_detail(request, exc, self.settings.max_frame_bytes)
            return problem(ProtocolError(detail).to_wire(), exc.status,
                           headers={k: v for k, v in exc.headers.items() if k == "Allow"})
        except ConnectionResetError:
            raise  # the peer left: nobody to answer
        except Exception:
            log.exception("the front door failed on %s %s", request.method, request.path)
            return problem({"code": "reach_error", "message": "the coordinator failed to "
                            "answer this request (its log says why); retry"}, 500)
        finally:
            self.inflight -= 1
            holder = request.get(HOLDER)
            if holder is not None:
                counts.drop(self.holding, holder)

    def identified(self, request: web.Request, caller: str) -> None:
        """The request names ``caller``, whom the door accepts: its connection no longer
        counts against its address's cap, and the request counts against the caller's share
        (or is refused)."""
        self.gate.identified(request.transport)
        self.hold(request, caller)

    def hold(self, request: web.Request, caller: str) -> None:
        """Count this request against ``caller``'s share of the door, or refuse it.

        The door answers at most ``max_connections`` requests at once; a caller may hold at
        most ``max_connections // (n + 1)`` of them, ``n`` the callers with requests being
        answered (itself included). A share is always left for one more caller, so one
        caller's SSE streams and long polls cannot make everyone else's calls 503; as the
        callers' requests end and come again, their shares even out. Past its share a caller
        is ``rejected`` (429), as a websocket caller past ``max_caller_tasks`` is."""
        held = self.holding.get(caller, 0)
        holders = len(self.holding) + (0 if held else 1)
        cap = self.settings.max_connections
        share = max(1, cap // (holders + 1))
        if held >= share:
            raise Rejected(
                f"caller {caller!r} has {held} requests being answered, its share of the "
                f"front door's {cap} (max_connections) while {holders} callers use it; "
                f"retry when one of them ends", share=share, level=1.0)
        counts.add(self.holding, caller)
        request[HOLDER] = caller


def _unread(request: web.Request, limit: int) -> web.Response | None:
    """The answer to a request whose headers alone refuse its body, or None.

    Any ``Content-Encoding`` but ``identity`` is 415: the coordinator never inflates a body.
    Why not inflate within a bound: a few KB of gzip inflate to a MiB of JSON, so the
    bound would still let an unauthenticated peer spend a loop step's CPU per few KB
    sent, and bodies are small JSON on a nearby network, where compression saves little.
    A declared ``Content-Length`` over ``max_frame_bytes`` is 413 before any byte is read."""
    encoding = request.headers.get("Content-Encoding")
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        return problem(ProtocolError(
            f"Content-Encoding {encoding[:40]!r} is not accepted: send the body "
            f"uncompressed (the coordinator inflates nothing; docs/security.md)").to_wire(),
            415, headers={"Accept-Encoding": "identity"})
    if (request.content_length or 0) > limit:
        return problem(ProtocolError(_too_large(limit)).to_wire(), 413)
    return None


def _too_large(limit: int) -> str:
    return f"the request body is over the coordinator's {limit}-byte limit (max_frame_bytes)"


def _http_detail(request: web.Request, exc: web.HTTPException, limit: int) -> str:
    if exc.status == 404:
        return (f"no route {request.method} {request.path}; the routes are listed at "
                f"/openapi.json")
    if exc.status == 405:
        return f"{request.method} is not allowed on {request.path}; allowed: " \
               f"{exc.headers.get('Allow', '?')}"
    if exc.status == 413:
        return _too_large(limit)
    return exc.text or exc.reason
