"""Where an SDK connection may go: the coordinators' URLs, in order, and the one it is on.

``Agent.connect`` and ``Client.connect`` take one ``ws://`` URL or a list of them (several
coordinators that are one Reach). A connection tries them in order and stays on the one that
answers. When that one is lost, the next round of tries starts at the *next* one, and the lost
one is tried last: a dead coordinator is not hammered while another is up. A round goes over
every coordinator once; between rounds the owner's own backoff waits, as it does for one URL.

A URL whose host name resolves to several addresses (round-robin DNS, a headless service)
counts as several coordinators: each address is dialled on its own, with the URL's host name
kept in the ``Host`` header and, for ``wss://``, in the TLS handshake. The name is resolved
again every round (with the loop's ``getaddrinfo``, never blocking it), so addresses that come
and go are followed. An IP address needs no resolving, and a name reached through a proxy is
the proxy's to resolve: each is one coordinator, dialled as the URL says.

Agents are spread (``spread``): an agent starts at a random coordinator, so that a fleet
given the same list does not all land on its first entry, and after a loss it tries the others
from a random one, so that the agents of a lost coordinator share out over the rest. A caller
starts at the first (the list is its order of preference, say the nearest first) and after a
loss goes on down the list. Both stay where they are until that coordinator goes away: no
moving back when an earlier one returns, which would only be a second interruption.

``prefer`` says which of the two an owner wants: ``"random"`` (an agent's default) or
``"first"`` (a caller's default). ``Agent.connect([url_b, url_a], prefer="first")`` places an
agent on ``url_b`` whenever it answers, and on ``url_a`` only while it does not: placing a
fleet on chosen nodes takes no loop of retries.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidURI
from websockets.proxy import get_proxy
from websockets.uri import parse_uri

from reach.errors import ProtocolError, ReachError, Unavailable
from reach.sdk.connection import dial, unreachable
from reach.wire import protocol as p

RESOLVE_TIMEOUT = 10.0
"""Seconds a host name may take to resolve (as long as a handshake may take, connection.py)."""


PREFER = ("random", "first")
"""The values of ``prefer``: where a connection starts and where it goes after a loss."""


def spread_for(prefer: str, rng: random.Random) -> random.Random | None:
    """The ``spread`` of ``Endpoints`` for a ``prefer`` value; ValueError for any other."""
    if prefer not in PREFER:
        raise ValueError(f"prefer={prefer!r}: use \"random\" (start on a random coordinator "
                         f"of the list) or \"first\" (the first that answers, in list order)")
    return rng if prefer == "random" else None


@dataclass(frozen=True)
class Target:
    """One coordinator to dial: its URL and, for a resolved name, one of its addresses."""

    url: str
    rank: tuple[int, int]  # (the URL's place in the list, the address's place in its answer)
    address: str | None = None  # None: dial the URL's own host
    port: int | None = None

    def same(self, other: Target) -> bool:
        """The same coordinator (the same URL and address; its rank may have changed)."""
        return (self.url, self.address) == (other.url, other.address)

    def __str__(self) -> str:
        return self.url if self.address is None else f"{self.url} (at {self.address})"


class Endpoints:
    """The coordinators one SDK connection may use, and the one it connected to last."""

    def __init__(self, urls: str | Sequence[str], *, spread: random.Random | None = None
                 ) -> None:
        self.urls: tuple[str, ...] = (urls,) if isinstance(urls, str) else tuple(urls)
        self.current: Target | None = None
        self._spread = spread

    @property
    def url(self) -> str:
        """The URL of the coordinator connected to (the first given, before any)."""
        if self.current is not None:
            return self.current.url
        return self.urls[0] if self.urls and isinstance(self.urls[0], str) else ""

    def describe(self) -> str:
        """``coordinator at URL`` for one, ``coordinators at URL, URL`` for several."""
        if len(self.urls) == 1:
            return f"coordinator at {self.urls[0]}"
        return "coordinators at " + ", ".join(map(str, self.urls))

    def check(self) -> None:
        """Raise for a list that names no coordinator, or an entry that is not a websocket URL
        (the same ``Unavailable`` a single bad URL gets when it is dialled)."""
        if not self.urls:
            raise Unavailable("no coordinator URL given: pass ws://HOST:PORT, or a list of them")
        for url in self.urls:
            if not isinstance(url, str):
                raise Unavailable(f"{url!r} is not a websocket URL: use ws://HOST:PORT, as "
                                  f"`reach serve` and `reach.url` print it", url=repr(url))
            try:
                parse_uri(url)
            except InvalidURI as exc:
                raise unreachable(url, exc) from None

    async def round(self, errors: list[Unavailable]) -> list[Target]:
        """Every coordinator once, in the order to try them now. A name that does not resolve
        adds its error to ``errors`` and no target."""
        found = await asyncio.gather(*(expand(url, i) for i, url in enumerate(self.urls)))
        targets: list[Target] = []
        for got in found:
            if isinstance(got, Unavailable):
                errors.append(got)
            else:
                targets.extend(got)
        current = self.current
        if current is None:  # the first connection: where a fleet spreads, or the first
            start = 0 if self._spread is None else self._spread.randrange(len(targets))
            return targets[start:] + targets[:start]
        # The one connected last is the one lost: it goes last. The others follow it in list
        # order (a caller) or from a random one (an agent: those of a lost coordinator spread
        # over the rest, rather than all landing on the one after it).
        lost = [t for t in targets if t.same(current)]
        rest = [t for t in targets if not t.same(current)]
        if not rest:
            return lost
        if self._spread is not None:
            start = self._spread.randrange(len(rest))
        else:
            start = next((n for n, t in enumerate(rest) if t.rank > current.rank), 0)
        return rest[start:] + rest[:start] + lost

    def connected(self, target: Target) -> Target | None:
        """Note ``target`` as the one connected to; returns the one before it if this is a move
        (to log it once), None for the first connection or the same coordinator again."""
        before, self.current = self.current, target
        return before if before is not None and not before.same(target) else None


async def expand(url: str, index: int) -> list[Target] | Unavailable:
    """The coordinators ``url`` stands for: one per address its host name resolves to."""
    uri = parse_uri(url)
    try:
        ipaddress.ip_address(uri.host)
        return [Target(url, (index, 0))]  # an address already
    except ValueError:
        pass
    if get_proxy(uri) is not None:
        return [Target(url, (index, 0))]
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            infos = await asyncio.get_running_loop().getaddrinfo(uri.host, uri.port,
                                                                 type=socket.SOCK_STREAM)
    except TimeoutError:
        return unreachable(url, OSError(f"resolving {uri.host!r} took over "
                                        f"{RESOLVE_TIMEOUT:g} s"))
    except OSError as exc:  # socket.gaierror is one
        return unreachable(url, exc)
    addresses = dict.fromkeys(str(info[4][0]) for info in infos)  # in order, once each
    if not addresses:
        return unreachable(url, OSError(f"{uri.host!r} resolves to no address"))
    return [Target(url, (index, n), address, uri.port) for n, address in enumerate(addresses)]


async def dial_any(endpoints: Endpoints, first: p.Register | p.Hello, *, max_frame_bytes: int,
                   unexpected: Callable[[str], ReachError] = ProtocolError
                   ) -> tuple[ClientConnection, p.Welcome, Target]:
    """One round: dial each coordinator of ``endpoints`` in turn (``connection.dial``) until
    one welcomes us. Only ``Unavailable`` moves on to the next; any other answer (a refused
    token, a coordinator that speaks wrong) is raised at once, as it is for one URL. With
    none reachable, the one error of a lone coordinator is raised as it is, or one naming
    them all."""
    errors: list[Unavailable] = []
    for target in await endpoints.round(errors):
        try:
            ws, welcome = await dial(target.url, first, max_frame_bytes=max_frame_bytes,
                                     unexpected=unexpected, host=target.address,
                                     port=target.port)
        except Unavailable as exc:
            errors.append(exc)
            continue
        return ws, welcome, target
    if len(errors) == 1:
        raise errors[0]
    raise Unavailable(f"no coordinator reachable of {len(endpoints.urls)} given: "
                      + " | ".join(e.message for e in errors), urls=list(endpoints.urls))
