"""HTTP/REST agents: a service that answers HTTP requests, reached as it is (docs/adapters.md).

One call is one request: ``method`` (default POST) to ``url`` + ``path``, where ``{name}``
segments of the path are filled from the params (and taken out of them); the params go as
the JSON body, or as the query string for GET, HEAD and DELETE (and the names listed under
``query`` for the other methods). Each request carries ``Idempotency-Key``, W3C
``traceparent``, ``X-Reach-Task-Id``, ``X-Reach-Caller`` and, when the caller gave a deadline,
``X-Reach-Deadline-Ms`` — also the request's own timeout (plus a short grace, so that the
gateway's timer, which knows whose deadline it was, is the one that decides).

What the answer means (the gateway's policy judges the kind reported):

    2xx                               result: JSON parsed, other text as {"text": ...},
                                      204/205, HEAD or an empty body as None
    4xx but 408 and 429               answer: final, never retried, not held against it
    408, 429 (overloaded *now*),      fault: breaker, retried elsewhere when idempotent;
    5xx, 3xx (never followed), reset, details carry status, a body excerpt, Retry-After
    read error, body over the limit
    connect refused, DNS failure,     undelivered: nothing was sent, the gateway fails over
    connect timeout, TLS handshake    at once even for work that is not idempotent

Liveness: with ``health`` a GET of that path (2xx = alive) is the heartbeat. Without one the
agent is "online while calls succeed": alive while its last call reached the service; after a
call that could not connect (and before the first call), a TCP connect to its host and port
is the check, so a stopped service goes suspected and comes back once it listens again.

The client is aiohttp (bench/http_clients.py measures it against httpx's pool); its cookie
jar is off, so a cookie one caller's call got never rides another caller's call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
from pydantic_core import to_json
from yarl import URL

from reach._version import __version__
from reach.adapters import base, openapi
from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered, declare
from reach.adapters.http_parts import fill, query_pairs, unreachable
from reach.core import names
from reach.core.schemas import compile_schema
from reach.ports import Reply, Work
from reach.wire.numbers import loads_finite

log = logging.getLogger("reach.adapters.http")

MAX_RESPONSE_BYTES = 16 << 20
MAX_OPENAPI_BYTES = 8 << 20
EXCERPT_CHARS = 1000        # of an error's body, in its details
DEADLINE_GRACE = 0.1        # s past the caller's deadline before the request itself gives up
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
QUERY_METHODS = openapi.QUERY_METHODS
_FIELD = re.compile(r"\{([^{}/]+)\}")
_HEADER_SAFE = " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_PENDING = "openapi.pending"  # stands in for a table the OpenAPI document fills at open()


@dataclass(slots=True, frozen=True)
class Route:
    """How one capability's call is carried, worked out once when it is declared."""

    method: str
    path: str                   # the template, relative to the agent's url
    fields: tuple[str, ...]     # the params named in the path
    query: bool                 # every param in the query string (GET, HEAD, DELETE)
    query_names: frozenset[str]  # for the other methods: the params sent in the query string
    headers: dict[str, str]     # the agent's and the capability's own


class HttpAgent(Adapter):
    """An HTTP/REST service behind the coordinator; see the module docstring."""

    kind = "http"
    OWN_KEYS = frozenset({"method", "path", "headers", "query"})

    def __init__(self, name: str, url: str, capabilities: dict[str, Any] | None = None, *,
                 health: str | None = None, headers: dict[str, str] | None = None,
                 openapi_url: str | None = None, max_concurrency: int = 16,
                 version: str = "0", health_interval: float | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES,
                 connect_timeout: float = 5.0) -> None:
        self._base = _base_url(name, url)
        self.url = url
        if health is not None and (not isinstance(health, str) or not health.startswith("/")):
            raise ValueError(f"agent {name!r}: health must be a path such as '/healthz', "
                             f"got {health!r}")
        self.health = health
        self.headers = _headers(name, "headers", headers)
        self.openapi_url = None if openapi_url is None else self._same_origin(name, openapi_url)
        if not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise ValueError(f"agent {name!r}: max_response_bytes must be a positive integer")
        if not isinstance(connect_timeout, int | float) or connect_timeout <= 0:
            raise ValueError(f"agent {name!r}: connect_timeout must be a positive number")
        self.max_response_bytes = max_response_bytes
        self.connect_timeout = float(connect_timeout)
        self._overrides = dict(capabilities or {})
        pending = openapi_url is not None and not self._overrides
        super().__init__(name, {_PENDING: {}} if pending else self._overrides,
                         max_concurrency=max_concurrency, version=version,
                         health_interval=health_interval)
        self._routes: dict[str, Route] = {}
        if openapi_url is None:
            self._declare(self._overrides)
        else:  # the overrides are checked now, completed once the document is read
            self.capabilities, self._routed = {}, {}
        self._session: aiohttp.ClientSession | None = None
        self._reached: bool | None = None  # did the last call reach the service (None: no call)
        self._no_deadline = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout)

    # ------------------------------------------------------------ declaring

    def _declare(self, table: dict[str, Any]) -> None:
        """Declare ``table`` (name → entry) and work out each capability's route."""
        declared = declare(self.name, table, self.OWN_KEYS)
        routes = {names.normalize(cap): self._route(cap, d.how) for cap, d in declared.items()}
        self.capabilities = declared
        self._routed = {names.normalize(cap): d for cap, d in declared.items()}
        self._routes = routes

    def _route(self, cap: str, how: dict[str, Any]) -> Route:
        where = f"agent {self.name!r}, capability {cap!r}"
        method = how.get("method", "POST")
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise ValueError(f"{where}: method must be one of {sorted(METHODS)}, got {method!r}")
        method = method.upper()
        path = how.get("path")
        if not isinstance(path, str) or not path.startswith("/") or "?" in path or "#" in path:
            raise ValueError(f"{where}: path must be a URL path starting with '/' (no query), "
                             f"such as '/orders/{{order_id}}'; got {path!r}")
        query = how.get("query", [])
        if not isinstance(query, list) or not all(isinstance(q, str) for q in query):
            raise ValueError(f"{where}: query must be a list of param names, got {query!r}")
        headers = {**self.headers, **_headers(self.name, f"capability {cap!r}: headers",
                                              how.get("headers"))}
        if method not in QUERY_METHODS:
            headers.setdefault("Content-Type", "application/json")
        return Route(method, path, tuple(_FIELD.findall(path)), method in QUERY_METHODS,
                     frozenset(query), headers)

    def _same_origin(self, name: str, url: str) -> str:
        if not isinstance(url, str) or not url:
            raise ValueError(f"agent {name!r}: openapi_url must be a path or a URL")
        if url.startswith("/"):
            return self._base + url
        base, given = URL(self._base), URL(url)
        if given.origin() != base.origin():
            raise ValueError(f"agent {name!r}: openapi_url {url!r} is not on the service's "
                             f"origin {str(base.origin())!r}: it is read from the service")
        return url

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_concurrency + 2,
                                               limit_per_host=0),
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": f"agent-reach/{__version__}"})
        if self.openapi_url is not None and not self._routes:
            try:
                await self._load_openapi(self.openapi_url)
            except BaseException:
                await self.shut()
                raise

    async def shut(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _load_openapi(self, url: str) -> None:
        """Fetch the document, declare its operations, compile their schemas off the loop."""
        assert self._session is not None
        try:
            async with self._session.get(url, headers=self.headers, allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=10)) as resp:
                if resp.status != 200:
                    raise ValueError(f"answered {resp.status} {resp.reason}")
                body = await _bounded(resp, MAX_OPENAPI_BYTES)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ValueError(f"agent {self.name!r}: could not read its OpenAPI document at "
                             f"{url}: {exc}") from None
        try:  # parsing and expanding are bounded, and off the loop (openapi.read)
            table, skipped = await asyncio.to_thread(openapi.read, body, self._overrides,
                                                     self.max_schema_bytes)
        except openapi.Unreadable as exc:
            raise ValueError(f"agent {self.name!r}: could not read its OpenAPI document at "
                             f"{url}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"agent {self.name!r}: OpenAPI document {url}: {exc}") from None
        for note in skipped:
            log.info("agent %s: OpenAPI operation left out: %s", self.name, note)
        self._declare(table)
        await asyncio.to_thread(lambda: [compile_schema(s.params) for s in self.specs])

    def describe(self) -> dict[str, Any]:
        extra = {} if self.openapi_url is None else {"openapi_url": self.openapi_url}
        return {"url": self.url, "health": self.health, **extra}

    # ------------------------------------------------------------ one call

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        route = self._routes[work.capability]
        session = self._session
        if session is None:
            raise Undelivered(f"agent {self.name!r} is not open (attach it with reach.attach)")
        params, path = work.params, route.path
        if route.fields:
            params = dict(params)
            path = fill(route.path, route.fields, params)
        headers = {**route.headers, "Idempotency-Key": _header(work.idempotency_key),
                   "X-Reach-Task-Id": work.task_id, "X-Reach-Caller": _header(work.caller)}
        traceparent = base.traceparent_of(work)
        if traceparent:
            headers["traceparent"] = traceparent
        deadline = work.deadline_ms
        if deadline is not None:
            headers["X-Reach-Deadline-Ms"] = str(max(1, int(deadline)))
        query: list[tuple[str, str]] | None = None
        body: bytes | None = None
        if route.query:
            query = query_pairs(params)
        else:
            if route.query_names:
                query = query_pairs({k: params[k] for k in route.query_names if k in params})
                params = {k: v for k, v in params.items() if k not in route.query_names}
            body = to_json(params)  # UTF-8, as JSON over HTTP is
        url = self._base + path
        try:
            async with session.request(route.method, url, params=query, data=body,
                                       headers=headers, allow_redirects=False,
                                       timeout=self._timeout(deadline)) as resp:
                self._reached = True
                return await self._outcome(resp, route, path)
        except aiohttp.ClientConnectorError as exc:  # refused, DNS, TLS handshake: not sent
            self._reached = False
            raise Undelivered(f"{route.method} {path}: {unreachable(self._base, exc)}") from None
        except aiohttp.ConnectionTimeoutError:  # no connection (from the pool) in time
            self._reached = False
            raise Undelivered(f"{route.method} {url}: no connection within "
                              f"{self.connect_timeout:g} s") from None
        except TimeoutError:  # also aiohttp's read timeouts
            raise AdapterFault(f"{route.method} {path}: no answer within the caller's "
                               f"deadline of {deadline or 0:.0f} ms") from None
        except aiohttp.ServerDisconnectedError:  # it was sent: a fault, in HTTP words
            raise AdapterFault(f"{route.method} {path}: the service closed the connection "
                               f"without answering") from None
        except aiohttp.ClientError as exc:  # reset, a broken body: it was sent
            raise AdapterFault(f"{route.method} {path}: {type(exc).__name__}: {exc}") from None

    def _timeout(self, deadline_ms: float | None) -> aiohttp.ClientTimeout:
        if deadline_ms is None:
            return self._no_deadline
        return aiohttp.ClientTimeout(total=deadline_ms / 1000 + DEADLINE_GRACE,
                                     connect=self.connect_timeout)

    async def _outcome(self, resp: aiohttp.ClientResponse, route: Route, path: str) -> Any:
        status = resp.status
        if 200 <= status < 300:
            if status in (204, 205) or route.method == "HEAD":
                return None
            body = await _bounded(resp, self.max_response_bytes, route, path)
            return _decode(resp, body, route, path) if body else None
        what = f"{route.method} {path} answered {status} {resp.reason or ''}".rstrip()
        details: dict[str, Any] = {"status": status, "body": await _excerpt(resp)}
        if 400 <= status < 500 and status not in (408, 429):
            raise AdapterAnswer(what, **details)
        with contextlib.suppress(ValueError):  # in seconds; an HTTP date is left out
            details["retry_after"] = max(0.0, float(resp.headers.get("Retry-After", "-")))
        if 300 <= status < 400:
            what += (f" (to {resp.headers.get('Location', '?')!r}; redirects are not followed: "
                     f"point the capability's path at the final URL)")
        raise AdapterFault(what, **details)

    # ------------------------------------------------------------ liveness

    async def check(self) -> bool:
        """GET ``health`` (2xx: alive), or a TCP connect; a failure raises in its own words
        ("connection refused by http://…", "GET /healthz answered 503"), which the probe
        loop logs once per change."""
        session = self._session
        if session is None:
            return False
        if self.health is not None:
            try:
                async with session.get(self._base + self.health, headers=self.headers,
                                       allow_redirects=False) as resp:
                    await _excerpt(resp)
                    if 200 <= resp.status < 300:
                        return True
                    raise AdapterFault(f"GET {self.health} answered {resp.status} "
                                       f"{resp.reason or ''}".rstrip())
            except aiohttp.ClientConnectorError as exc:
                raise AdapterFault(unreachable(self._base, exc)) from None
            except aiohttp.ServerDisconnectedError:
                raise AdapterFault(f"GET {self.health}: the service closed the connection "
                                   f"without answering") from None
        if self._reached:
            return True
        base = URL(self._base)
        try:
            _, writer = await asyncio.open_connection(base.host, base.port)
        except OSError as exc:
            raise AdapterFault(unreachable(self._base, exc)) from None
        writer.close()
        await writer.wait_closed()
        if self._reached is None:
            self._reached = True
        return True


# ---------------------------------------------------------------- helpers (pure but the reads)


def _base_url(name: str, url: str) -> str:
    try:
        parsed = URL(url) if isinstance(url, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host \
            or parsed.query_string or parsed.fragment:
        raise ValueError(f"agent {name!r}: url must be an http:// or https:// URL with a "
                         f"host and no query, such as 'http://127.0.0.1:9000'; got {url!r}")
    return str(parsed).rstrip("/")


def _headers(agent: str, where: str, given: Any) -> dict[str, str]:
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and ":" not in k
            and not any(c in k + v for c in "\r\n\0") for k, v in given.items()):
        raise ValueError(f"agent {agent!r}: {where} must be a table of header names to text "
                         f"values (no line breaks); got {given!r}")
    return dict(given)


def _header(value: str) -> str:
    """A header value as sent: printable ASCII as is, anything else percent-encoded."""
    return value if value.isascii() and value.isprintable() else quote(value, safe=_HEADER_SAFE)


async def _bounded(resp: aiohttp.ClientResponse, limit: int, route: Route | None = None,
                   path: str = "") -> bytes:
    """The whole body, refused past ``limit`` bytes (as sent, and as decompressed)."""
    what = f"{route.method} {path}" if route else str(resp.url)
    length = resp.content_length
    if length is not None and length > limit:
        raise AdapterFault(f"{what}: the response is {length} bytes, over the limit of {limit} "
                           f"(max_response_bytes)", status=resp.status)
    if length is not None and "Content-Encoding" not in resp.headers:
        return await resp.read()
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        if len(buf) > limit:
            raise AdapterFault(f"{what}: the response is over the limit of {limit} bytes "
                               f"(max_response_bytes)", status=resp.status)
    return bytes(buf)


async def _excerpt(resp: aiohttp.ClientResponse) -> str:
    """The start of an error's body, as text (the rest is not read)."""
    try:
        raw = await resp.content.read(EXCERPT_CHARS * 4)
    except (aiohttp.ClientError, TimeoutError):
        return ""
    return _text(resp, raw)[:EXCERPT_CHARS]


def _decode(resp: aiohttp.ClientResponse, body: bytes, route: Route, path: str) -> Any:
    ctype = resp.content_type
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            return loads_finite(body)
        except ValueError as exc:
            raise AdapterFault(f"{route.method} {path}: the body is not the JSON its "
                               f"Content-Type says: {exc}", status=resp.status) from None
    return {"text": _text(resp, body)}


def _text(resp: aiohttp.ClientResponse, body: bytes) -> str:
    try:
        return body.decode(resp.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")

