"""The POST rules every notification Reach sends follows: A2A push notifications, task
completion webhooks (``reach.server.pushes``) and alert webhooks (``reach.server.alerts_out``).

One try is one POST of a bounded body (``MAX_BODY`` bytes) that never follows a redirect (a
3xx is an answer, not a hop: a receiver cannot bounce Reach to an inside address) and is cut
after ``timeout`` seconds. A connection error, a timeout, a 408, 425, 429 or any 5xx is tried
again after a jittered backoff (``reach.core.backoff``), up to ``tries`` tries; any other
answer is final (2xx delivered; another 4xx, or a 3xx, refused). ``post`` returns why it was
given up (None: delivered).

SSRF (OWASP's guidance, DESIGN.md "Trust at the boundary"): a URL a *caller* gives is checked
by ``refusal`` when it is given and again before each try (its name may resolve elsewhere by
then), and its addresses once more as the connection is made (``session``'s
``GuardedResolver``: a name that changes its answer in between cannot reach inside either):
http or https only, and every address its host resolves to must be public, unless the
operator's ``Allow`` names its network (``notify_allow``) or allows every private receiver
(``a2a_push_private``). An alert webhook's URL is the operator's own and is not checked.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import random
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from reach.core.backoff import Backoff

__all__ = ["MAX_BODY", "RETRIED", "Allow", "GuardedResolver", "post", "refusal", "session"]

RETRIED = frozenset({408, 425, 429})  # and every 5xx
MAX_BODY = 1 << 20  # bytes of one notification body
RESOLVE_TIMEOUT = 5.0  # seconds a URL's host may take to resolve
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Allow:
    """Which non-public receivers a caller-given URL may name: the networks listed
    (``notify_allow``), or every one (``everything``: ``a2a_push_private``)."""

    networks: tuple[Network, ...] = ()
    everything: bool = False

    @classmethod
    def of(cls, cidrs: Iterable[str] | None, everything: bool = False) -> Allow:
        """From CIDR strings (``"127.0.0.0/8"``); a bad one is a ``ValueError`` naming it."""
        nets = []
        for cidr in cidrs or ():
            try:
                nets.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"notify_allow: {cidr!r} is not a network (CIDR such as "
                                 f"10.0.0.0/8): {exc}") from None
        return cls(tuple(nets), everything)

    def admits(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return self.everything or any(address in net for net in self.networks)


def _blocked(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Not a public unicast destination (as the A2A SDK's push URL validator judges it: an
    IPv4-mapped IPv6 address as the IPv4 address inside it)."""
    return (not address.is_global or address.is_loopback or address.is_link_local
            or address.is_multicast or address.is_reserved or address.is_unspecified)


async def refusal(url: str, allow: Allow) -> str | None:
    """Why Reach will not POST to ``url`` (None: it may), saying what to do instead."""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError as exc:
        return f"URL {url[:200]!r} cannot be read: {exc}"
    if parsed.scheme not in ("http", "https"):
        return f"URL {url[:200]!r} is not http(s): give an http:// or https:// URL"
    host = parsed.hostname
    if not host:
        return f"URL {url[:200]!r} names no host"
    if allow.everything:
        return None
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                                 type=socket.SOCK_STREAM)
    except (OSError, ValueError, TimeoutError) as exc:  # (a bad name: UnicodeError)
        why = "no answer in time" if isinstance(exc, TimeoutError) else exc
        return f"the host of {url[:200]!r} does not resolve ({why}); give a reachable one"
    for info in infos:
        address = _address(str(info[4][0]))
        if _blocked(address) and not allow.admits(address):
            return (f"URL {url[:200]!r} resolves to {address}, a private, loopback or "
                    f"link-local address: give a public receiver, or ask the operator to "
                    f"name its network in notify_allow (reach serve --notify-allow CIDR)")
    return None


def where(url: str) -> str:
    """A receiver's URL as a log line shows it: its scheme, host and port, not its path or
    query (a webhook URL's path is often its only secret, as a chat service's hooks are)."""
    parts = urllib.parse.urlsplit(url)  # (every URL sent to was read by ``refusal``)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as resolved (a scope id dropped), an IPv4-mapped one as its IPv4 self."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


class GuardedResolver(AbstractResolver):
    """aiohttp's own resolver, then the ``Allow`` rules on every address it found, when the
    connection is made: a name that resolved to a public address when ``refusal`` looked and
    to an inside one a moment later (DNS rebinding) still cannot reach inside. A refused name
    is an ``OSError``, which aiohttp reports as a connection error."""

    def __init__(self, allow: Allow) -> None:
        self.allow = allow
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        for result in found:
            address = _address(str(result["host"]))
            if _blocked(address) and not self.allow.admits(address):
                raise OSError(errno.EHOSTUNREACH, f"{host} resolves to {address} now, a "
                              f"private, loopback or link-local address: not connected")
        return found

    async def close(self) -> None:
        await self._inner.close()


def session(allow: Allow) -> aiohttp.ClientSession:
    """An HTTP client for caller-given URLs under ``allow`` (``GuardedResolver``)."""
    if allow.everything:
        return aiohttp.ClientSession()
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=GuardedResolver(allow)))


class Refused(Exception):
    """A URL ``refusal`` turned down before a try: not retried."""


async def post(session: aiohttp.ClientSession, url: str, data: bytes,
               headers: Mapping[str, str], *, tries: int, backoff: Backoff, timeout: float,
               rng: random.Random, sleep: Callable[[float], Awaitable[None]],
               allow: Allow | None = None, tried: Callable[[], None] | None = None
               ) -> str | None:
    """POST ``data`` to ``url`` by the rules of the module docstring: None once delivered,
    else why it was given up. ``allow``: the URL is a caller's, checked before each try;
    ``tried`` is called once per POST made."""
    if len(data) > MAX_BODY:
        return f"the body is {len(data)} bytes, over the {MAX_BODY}-byte bound"
    reason = ""
    for attempt in range(tries):
        if attempt:
            await sleep(backoff.delay(attempt - 1, rng))
        try:
            if allow is not None and (why := await refusal(url, allow)) is not None:
                raise Refused(why)
            if tried is not None:
                tried()
            async with session.post(url, data=data, headers=dict(headers),
                                    allow_redirects=False,
                                    timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                await answer.content.read(64 << 10)  # (an answer's body is not wanted)
                status = answer.status
        except Refused as exc:
            return str(exc)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            continue
        if 200 <= status < 300:
            return None
        reason = f"HTTP {status}"
        if status < 500 and status not in RETRIED:
            break  # the receiver refused this notification: trying again won't help
    return reason
