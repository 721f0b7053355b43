"""Queue workers behind NATS request-reply (docs/adapters.md, "Queue workers (NATS)").

    from reach.adapters import NatsAgent
    await reach.attach(NatsAgent("orders-workers", "nats://127.0.0.1:4222",
        capabilities={"orders.lookup": {"subject": "orders.lookup", "idempotent": True,
                                        "latency_ms": 200}}))

Each call is one NATS request on the capability's subject: the params as a JSON body, the
task's identity in headers, the reply on an inbox of its own. The team's workers subscribe in
a queue group, so NATS spreads the calls over them; Reach sees the group as one agent. Why
request-reply, what the headers are and how replies and errors are read: see the docs.

nats-py is an optional extra (``pip install 'agent-reach[nats]'``): this module imports it
only when a ``NatsAgent`` is built, so ``import reach.adapters`` works without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered, traceparent_of
from reach.ports import Reply, Work

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

log = logging.getLogger("reach.adapters.nats")

INSTALL = "pip install 'agent-reach[nats]'"
# The NATS "micro" services framework's error convention (nats.micro.request), so services
# written with it (or with any client's micro package) are reached as they are.
ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
PING_PREFIX = "$SRV.PING."  # answered by every instance of a micro service
SCHEMES = frozenset({"nats", "tls", "ws", "wss"})
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # micro's NAME_REGEX
MAX_MESSAGE = 500  # characters of a worker's error text kept in the wire error
# The request timeout when the caller gave no deadline: only a backstop, the gateway's own
# completion timeout (which cancels the request) normally ends a silent call long before.
BACKSTOP_FACTOR = 10.0
BACKSTOP_MIN = 30.0
# no latency_ms declared: past the gateway's default_timeout (30 s) and a P95 that grew a lot
BACKSTOP_UNDECLARED = 120.0


def _client_class() -> type[Client]:
    try:
        from nats.aio.client import Client
    except ImportError:
        raise ImportError(f"NatsAgent needs the NATS client (nats-py), an optional extra: "
                          f"{INSTALL}") from None
    return Client


class NatsAgent(Adapter):
    """Workers on NATS reached by request-reply, one subject per capability.

    ``servers`` is one URL or a list (``nats://``, ``tls://``, ``ws://``, ``wss://``);
    each capability's ``subject`` defaults to its name. Liveness: connected to NATS and, when
    ``health_subject`` is set, a request to it answered; else, when ``service`` names a NATS
    micro service, its ``$SRV.PING.<service>`` answered. ``request_timeout`` bounds a call that
    has no caller deadline (default: 10 × latency_ms, at least 30 s; 120 s when undeclared;
    the gateway's completion timeout normally ends it first). ``connect_timeout`` bounds the
    wait for NATS in ``open``: when NATS is down then, the agent is attached as suspected and
    comes online once the client connects (it keeps trying every ``reconnect_wait`` seconds, as
    it does after a disconnect).
    """

    kind: ClassVar[str] = "nats"
    OWN_KEYS: ClassVar[frozenset[str]] = frozenset({"subject"})

    def __init__(self, name: str, servers: str | list[str] = "nats://127.0.0.1:4222", *,
                 capabilities: Mapping[str, Any], max_concurrency: int = 16,
                 version: str = "0", health_interval: float | None = None,
                 health_subject: str | None = None, service: str | None = None,
                 connect_timeout: float = 2.0, reconnect_wait: float = 1.0,
                 request_timeout: float | None = None, max_reply_bytes: int = 1 << 20,
                 user: str | None = None, password: str | None = None,
                 token: str | None = None) -> None:
        _client_class()  # say how to install nats-py before anything else is checked
        super().__init__(name, capabilities, max_concurrency=max_concurrency,
                         version=version, health_interval=health_interval)
        self.servers = _servers(name, servers)
        for cap, declared in self.capabilities.items():
            subject = declared.how.setdefault("subject", cap)
            _check_subject(subject, f"agent {name!r}, capability {cap!r}: subject")
        if health_subject is not None:
            _check_subject(health_subject, f"agent {name!r}: health_subject")
        if service is not None and not (isinstance(service, str)
                                        and _SERVICE_NAME.match(service)):
            raise ValueError(f"agent {name!r}: service must be a NATS micro service name "
                             f"(letters, digits, - and _), got {service!r}")
        _positive(name, "connect_timeout", connect_timeout)
        _positive(name, "reconnect_wait", reconnect_wait, zero=True)
        if request_timeout is not None:
            _positive(name, "request_timeout", request_timeout)
        if not isinstance(max_reply_bytes, int) or max_reply_bytes < 1:
            raise ValueError(f"agent {name!r}: max_reply_bytes must be a positive integer, "
                             f"got {max_reply_bytes!r}")
        self.health_subject = health_subject
        self.service = service
        self.connect_timeout = float(connect_timeout)
        self.reconnect_wait = float(reconnect_wait)
        self.request_timeout = request_timeout
        self.max_reply_bytes = max_reply_bytes
        self._auth = {k: v for k, v in (("user", user), ("password", password),
                                        ("token", token)) if v is not None}
        self._nc: Client | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._last_error: str | None = None

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Connect to NATS, waiting up to ``connect_timeout``; past it the client keeps trying
        in the background (the agent is attached suspected and comes online once connected).
        A mistake no retry can fix (a malformed server URL) is raised here."""
        nc = _client_class()()
        self._nc = nc
        options: dict[str, Any] = {
            "servers": self.servers, "name": f"reach:{self.name}", "allow_reconnect": True,
            "max_reconnect_attempts": -1, "reconnect_time_wait": self.reconnect_wait,
            "connect_timeout": self.connect_timeout, "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected, "reconnected_cb": self._on_reconnected,
            **self._auth}
        task = asyncio.get_running_loop().create_task(
            nc.connect(**options), name=f"reach-nats-connect-{self.name}")
        self._connecting = task
        task.add_done_callback(self._connect_ended)
        await asyncio.wait({task}, timeout=self.connect_timeout)
        if not task.done():
            log.warning("agent %s: NATS at %s is not reachable yet; attached as suspected, it "
                        "comes online once it connects (is nats-server running? e.g. "
                        "nats-server -a 127.0.0.1 -p 4222)", self.name, ", ".join(self.servers))
            return
        if task.exception() is not None:
            error = task.exception()
            await self.shut()
            raise ValueError(f"agent {self.name!r}: cannot connect to NATS at "
                             f"{', '.join(self.servers)}: {error!r}") from error

    async def shut(self) -> None:
        """Stop connecting and close the connection (the base has cancelled or drained every
        call by now, so nothing of ours is left to flush but what is queued)."""
        task, nc = self._connecting, self._nc
        self._connecting = self._nc = None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception as exc:  # closing a broken connection: nothing left to save
                log.debug("agent %s: closing NATS: %r", self.name, exc)

    def _connect_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("agent %s: gave up connecting to NATS at %s: %r", self.name,
                      ", ".join(self.servers), task.exception())
        else:
            self._last_error = None
            log.info("agent %s: connected to NATS at %s", self.name, ", ".join(self.servers))

    async def _on_error(self, exc: Exception) -> None:
        # The client retries for ever: say each new kind of trouble once (a refused
        # connection, a refused password), not every retry.
        seen = f"{type(exc).__name__}: {exc}"
        if seen != self._last_error:
            self._last_error = seen
            log.warning("agent %s: NATS at %s: %s", self.name, ", ".join(self.servers), seen)

    async def _on_disconnected(self) -> None:
        if self._nc is not None:  # not closed by shut
            log.warning("agent %s: lost NATS at %s; reconnecting (calls fail over meanwhile)",
                        self.name, ", ".join(self.servers))

    async def _on_reconnected(self) -> None:
        self._last_error = None
        log.info("agent %s: reconnected to NATS", self.name)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"servers": list(self.servers),
                               "subjects": [d.how["subject"]
                                            for d in self.capabilities.values()]}
        if self.health_subject is not None:
            out["health_subject"] = self.health_subject
        if self.service is not None:
            out["service"] = self.service
        return out

    # ------------------------------------------------------------ calls

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        from nats import errors

        nc = self._nc
        subject: str = how["subject"]
        if nc is None or not nc.is_connected:
            raise Undelivered(f"not connected to NATS at {', '.join(self.servers)}")
        timeout = self._timeout(work)
        body = json.dumps(work.params, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            msg = await nc.request(subject, body, timeout=timeout, headers=headers(work))
        except errors.NoRespondersError:
            raise Undelivered(f"no worker listens on {subject!r} (NATS: no responders)"
                              ) from None
        except errors.TimeoutError:
            raise AdapterFault(f"no reply on {subject!r} within {timeout:.3g} s",
                               subject=subject, timeout=True) from None
        except errors.MaxPayloadError:
            raise Undelivered(f"params of {len(body)} bytes are over the NATS server's "
                              f"max_payload ({nc.max_payload} bytes)") from None
        except (errors.ConnectionClosedError, errors.ConnectionDrainingError,
                errors.OutboundBufferLimitError) as exc:
            raise Undelivered(f"NATS connection cannot send now: {type(exc).__name__}"
                              ) from None
        return self._read(msg, subject)

    def _timeout(self, work: Work) -> float:
        """The request's own bound. The gateway cancels the call at its completion timeout
        (or the caller's deadline), so this only has to be later than both: a caller's
        deadline plus a little, else the backstop."""
        declared = self._routed[work.capability]
        latency_ms = declared.spec.latency_ms
        backstop = self.request_timeout or (BACKSTOP_UNDECLARED if latency_ms is None else max(
            BACKSTOP_MIN, latency_ms / 1000 * BACKSTOP_FACTOR))
        if work.deadline_ms is None:
            return backstop
        left = max(work.deadline_ms, 0.0) / 1000
        return min(backstop, left * 1.1 + 0.1)

    def _read(self, msg: Msg, subject: str) -> Any:
        """The reply as a result, or as the answer or fault its micro error headers say."""
        data = msg.data
        if len(data) > self.max_reply_bytes:
            raise AdapterFault(f"reply on {subject!r} of {len(data)} bytes is over "
                               f"max_reply_bytes ({self.max_reply_bytes})", subject=subject)
        found = msg.headers or {}
        code, text = found.get(ERROR_CODE_HEADER), found.get(ERROR_HEADER)
        if code is None and text is None:
            return decode(data, subject)
        details: dict[str, Any] = {"subject": subject}
        status = _status(code)
        if status is not None:
            details["status"] = status
        elif code:
            details["service_code"] = code[:100]
        if data:
            details["body"] = decode(data, subject)
        message = (text or f"error {code}")[:MAX_MESSAGE]
        if status is not None and 400 <= status < 500:
            raise AdapterAnswer(message, **details)
        raise AdapterFault(message, **details)

    # ------------------------------------------------------------ liveness

    async def check(self) -> bool:
        """Connected, and the health subject (or the micro service's PING) answered."""
        nc = self._nc
        if nc is None or not nc.is_connected:
            return False
        subject = self.health_subject or (
            PING_PREFIX + self.service if self.service is not None else None)
        if subject is None:
            return True
        try:
            msg = await nc.request(subject, b"", timeout=self.connect_timeout)
        except Exception as exc:  # no responders, no answer in time: not there
            log.debug("agent %s: health request on %r: %r", self.name, subject, exc)
            return False
        return not (msg.headers and ERROR_CODE_HEADER in msg.headers)


def headers(work: Work) -> dict[str, str]:
    """The task's identity as a worker reads it (docs/adapters.md lists them)."""
    out = {"Idempotency-Key": work.idempotency_key, "Reach-Task-Id": work.task_id,
           "Reach-Attempt": str(work.attempt), "Reach-Caller": work.caller}
    traceparent = traceparent_of(work)
    if traceparent is not None:
        out["traceparent"] = traceparent
    else:  # a caller-chosen trace id that is not W3C-shaped
        out["Reach-Trace-Id"] = work.trace_id
    if work.deadline_ms is not None:
        out["Reach-Deadline-Ms"] = str(max(0, int(work.deadline_ms)))
    return out


def decode(data: bytes, subject: str) -> Any:
    """A reply body as a result: JSON as it is, other text as ``{"text": ...}``, nothing as
    None. Bytes that are not UTF-8 text are a fault (a result must travel as JSON)."""
    if not data:
        return None
    try:
        return json.loads(data, parse_constant=_refuse)
    except ValueError:
        pass
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        raise AdapterFault(f"reply on {subject!r} is neither JSON nor UTF-8 text "
                           f"({len(data)} bytes)", subject=subject) from None


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")  # NaN and Infinity: read as text instead


def _status(code: str | None) -> int | None:
    try:
        return int(code) if code is not None else None
    except ValueError:
        return None


def _servers(agent: str, servers: str | list[str]) -> list[str]:
    listed = [servers] if isinstance(servers, str) else servers
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"agent {agent!r}: servers must be a NATS URL or a non-empty list "
                         f"of them, e.g. 'nats://127.0.0.1:4222'")
    for url in listed:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in SCHEMES or not parts.hostname:
            raise ValueError(f"agent {agent!r}: {url!r} is not a NATS server URL; write it "
                             f"as nats://HOST:PORT (schemes: {', '.join(sorted(SCHEMES))})")
    return list(listed)


def _check_subject(subject: Any, where: str) -> None:
    """A subject a request may be published to: dot-separated tokens, no wildcards."""
    tokens = subject.split(".") if isinstance(subject, str) else [""]
    if (not all(tokens) or any(t in ("*", ">") for t in tokens)
            or any(c.isspace() for c in subject)):
        raise ValueError(f"{where} must be a NATS subject without wildcards or spaces, "
                         f"such as 'orders.lookup'; got {subject!r}")


def _positive(agent: str, key: str, value: Any, *, zero: bool = False) -> None:
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and math.isfinite(value) and (value >= 0 if zero else value > 0))
    if not ok:
        raise ValueError(f"agent {agent!r}: {key} must be a finite number of seconds "
                         f"{'>= 0' if zero else '> 0'}, got {value!r}")
