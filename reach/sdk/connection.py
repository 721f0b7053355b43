"""Opening an SDK connection: dial the coordinator, say who we are, read its ``welcome``.

Both SDKs open the same way, the agent with ``register`` and the caller with ``hello``; each
keeps its own loop for reading frames and for coming back after a lost connection (with
``core.backoff``). Every failure to get a connection is one of the library's errors:

    Unavailable         the coordinator is not there, did not answer, or hung up
    (from the wire)     it answered with an ``error`` frame (unauthorized, protocol_error, ...)
    ``unexpected``      it answered with something other than ``welcome``
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.core.backoff import Backoff
from reach.errors import ProtocolError, ReachError, Unavailable, from_wire
from reach.wire import protocol as p
from reach.wire.inbound import Inbound

ANSWER_TIMEOUT = 10.0
"""Seconds to wait for the websocket handshake, and then for the answer to the first frame (a
coordinator that accepts but never answers)."""


class ClientInbound(Inbound, ClientConnection):
    """An SDK's connection: frames from the coordinator are handed to the SDK's handler as
    they arrive (reach.wire.inbound)."""


async def dial(url: str, first: p.Register | p.Hello, *, max_frame_bytes: int,
               unexpected: Callable[[str], ReachError] = ProtocolError,
               host: str | None = None, port: int | None = None
               ) -> tuple[ClientConnection, p.Welcome]:
    """Connect to ``url``, send ``first`` and return the open connection with its welcome.
    ``host`` and ``port`` (one address of the URL's name, endpoints.py) change where the TCP
    connection goes, not the ``Host`` header or the TLS name, which stay the URL's."""
    where: dict[str, Any] = {} if host is None else {"host": host, "port": port}
    try:
        ws = await websockets.connect(url, max_size=max_frame_bytes, compression=None,
                                      ping_interval=None, open_timeout=ANSWER_TIMEOUT,
                                      create_connection=ClientInbound, **where)
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        raise unreachable(url, exc) from exc
    try:
        try:
            await ws.send(p.dump(first))
            async with asyncio.timeout(ANSWER_TIMEOUT):
                frame = p.parse(await ws.recv())
        except TimeoutError as exc:
            raise Unavailable(f"coordinator at {url} did not answer {first.type!r} "
                              f"in {ANSWER_TIMEOUT:g} s") from exc
        except ConnectionClosed as exc:
            raise Unavailable(f"coordinator at {url} closed the connection") from exc
        if isinstance(frame, p.Error):
            raise from_wire(frame.error.model_dump())
        if not isinstance(frame, p.Welcome):
            raise unexpected(f"expected 'welcome', got {frame.type!r}")
    except BaseException:
        await ws.close()
        raise
    return ws, frame


def unreachable(url: str, exc: BaseException) -> Unavailable:
    """Why no connection to ``url``, and what to try: a wrong URL is not a stopped coordinator."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if isinstance(exc, InvalidURI) or scheme not in ("ws", "wss"):
        hint = (" (http:// is the REST front door's; the SDKs speak websocket)"
                if scheme in ("http", "https") else "")
        return Unavailable(f"{url!r} is not a websocket URL{hint}: use ws://HOST:PORT, as "
                           f"`reach serve` and `reach.url` print it", url=url)
    if isinstance(exc, InvalidHandshake):
        return Unavailable(f"something answers at {url} but not as a Reach coordinator "
                           f"({exc}): check the port (`reach serve` prints the websocket URL)",
                           url=url)
    return Unavailable(f"cannot reach a coordinator at {url}: {exc}; is it running?", url=url)


async def redial(dial_once: Callable[[], Awaitable[None]], *, within: float, backoff: Backoff,
                 stopped: Callable[[], bool], rng: random.Random) -> bool:
    """Call ``dial_once`` after each ``backoff`` delay until it connects (True), or ``within``
    seconds pass or ``stopped()`` says to give up (False). A ``ReachError`` is a failed try."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    retry = 0
    while not stopped() and loop.time() < give_up:
        await asyncio.sleep(backoff.delay(retry, rng))
        retry += 1
        try:
            await dial_once()
        except ReachError:
            continue
        return True
    return False
