"""The admin feed client: one websocket session to a coordinator (docs/admin-feed.md).

The dashboard only ever sees the :class:`FeedConnection` protocol, so tests and the screenshot
script swap in a scripted feed (see :mod:`dashboard.sample`). :class:`AdminFeed` is the real
one: :meth:`AdminFeed.receive` returns the next ``snapshot`` or ``delta`` frame, decoded with
the feed's own models (``reach.wire.admin.parse_admin``), and on the way hands every ``reply``
to the :meth:`AdminFeed.command` waiting for it. So replies arrive only while someone is
receiving; the dashboard's feed worker always is. A frame of a known type that the models
refuse ends the connection (the dashboard reconnects and starts from a fresh snapshot); a
frame of a type newer than this client is skipped.

Errors (all :class:`FeedError`)::

    FeedError
    ├── AdminRefused     the token was refused: reconnecting will not help
    ├── FeedClosed       the connection went away (or never opened): reconnect
    └── CommandFailed    the coordinator answered a command with ok=false (code, message)
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.errors import ProtocolError
from reach.wire import admin
from reach.wire import protocol as p

from .model import JSON

POLICY_VIOLATION = 1008
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""A snapshot of a big coordinator is one frame; do not let the client's default refuse it."""


class FeedError(Exception):
    """Anything that went wrong talking to the admin feed."""


class AdminRefused(FeedError):
    """The coordinator refused the admin token (error ``unauthorized``, close code 1008)."""


class FeedClosed(FeedError):
    """The feed connection closed or could not be opened."""


class CommandFailed(FeedError):
    """A command's reply said ``ok: false``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class FeedConnection(Protocol):
    """What the dashboard needs from an open admin feed."""

    async def receive(self) -> admin.Snapshot | admin.Delta:
        """The next ``snapshot`` or ``delta`` frame; raises :class:`FeedError`."""
        ...

    async def command(self, action: str, args: JSON) -> Any:
        """Run one command and return its reply's ``result``; raises :class:`FeedError`."""
        ...

    async def close(self) -> None:
        ...


Connector = Callable[[str, str], Awaitable[FeedConnection]]
"""How the dashboard opens a feed: ``await connector(url, token)``."""


class AdminFeed:
    """The admin feed over a real websocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._closed: FeedError | None = None

    @classmethod
    async def open(cls, url: str, token: str, *, open_timeout: float = 5.0) -> AdminFeed:
        """Connect to ``url`` and present ``token``; the snapshot is the first
        :meth:`receive`. A refused token surfaces there, as :class:`AdminRefused`."""
        try:
            # The token also rides the handshake: at its connection limit the coordinator
            # still lets an operator in on the seats it keeps for the admin feed.
            ws = await websockets.connect(url, max_size=MAX_FRAME_BYTES,
                                          open_timeout=open_timeout,
                                          additional_headers={"Authorization": f"Bearer {token}"})
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise FeedClosed(f"cannot connect to {url}: {exc or type(exc).__name__}") from exc
        except InvalidURI as exc:
            raise AdminRefused(f"not a websocket url: {url}") from exc
        feed = cls(ws)
        await feed._send(p.AdminHello(token=token))
        return feed

    # ------------------------------------------------------------ reading

    async def receive(self) -> admin.Snapshot | admin.Delta:
        while True:
            frame = await self._next_frame()
            if isinstance(frame, admin.Snapshot | admin.Delta):
                return frame
            if isinstance(frame, admin.Reply):
                self._settle(frame)
            elif isinstance(frame, p.Error):
                await self._error(frame)
            # None: a frame type newer than this client, skipped.

    async def _error(self, frame: p.Error) -> None:
        """An ``error`` frame answers a command (it has its ``id``), or refuses the token.
        Any other connection-level error is left to the coordinator: it closes if it must."""
        code, message = frame.error.code, frame.error.message
        future = self._pending.pop(frame.id, None) if frame.id is not None else None
        if future is not None:
            if not future.done():
                future.set_exception(CommandFailed(code, message))
            return
        if code == "unauthorized":
            failure = AdminRefused(message or code)
            self._fail_pending(failure)
            await self._ws.close()
            raise failure

    async def _next_frame(self) -> admin.Snapshot | admin.Delta | admin.Reply | p.Error | None:
        """The next frame as its model, or None for a frame this client does not know."""
        if self._closed is not None:
            raise self._closed
        try:
            raw = await self._ws.recv()
        except ConnectionClosed as exc:
            failure = self._closed_by(exc)
            self._fail_pending(failure)
            raise failure from exc
        try:
            return admin.parse_admin(raw)
        except ProtocolError as exc:
            refused = exc
        # Off the models: say why, unless it is only newer than this client.
        try:
            frame = json.loads(raw)
        except ValueError:
            failure = FeedClosed(f"not JSON from the feed: {str(raw)[:80]!r}")
        else:
            if not isinstance(frame, dict) or frame.get("type") not in admin.ADMIN_FRAME_TYPES:
                return None
            failure = FeedClosed(f"bad frame from the coordinator: {refused}")
        self._fail_pending(failure)
        await self._ws.close()
        raise failure from refused

    @staticmethod
    def _closed_by(exc: ConnectionClosed) -> FeedError:
        close = exc.rcvd
        if close is not None and close.code == POLICY_VIOLATION:
            return AdminRefused(close.reason or "admin token refused")
        if close is None:
            return FeedClosed("connection lost")
        return FeedClosed(f"connection closed ({close.code} {close.reason})".replace(" )", ")"))

    def _settle(self, frame: admin.Reply) -> None:
        future = self._pending.pop(frame.id, None)
        if future is None or future.done():
            return
        if frame.ok:
            future.set_result(frame.result)
        elif frame.error is None:
            future.set_exception(CommandFailed("error", ""))
        else:
            future.set_exception(CommandFailed(frame.error.code, frame.error.message))

    def _fail_pending(self, failure: FeedError) -> None:
        self._closed = failure
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(failure)

    # ------------------------------------------------------------ commands

    async def command(self, action: str, args: JSON) -> Any:
        if self._closed is not None:
            raise self._closed
        command_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        try:
            await self._send(p.Command(id=command_id, action=action, args=args))
            return await future
        finally:
            self._pending.pop(command_id, None)

    async def _send(self, frame: p.AdminHello | p.Command) -> None:
        try:
            await self._ws.send(p.dump(frame))
        except ConnectionClosed as exc:
            raise self._closed_by(exc) from exc

    async def close(self) -> None:
        self._fail_pending(FeedClosed("closed by the dashboard"))
        await self._ws.close()


async def connect(url: str, token: str) -> FeedConnection:
    """The default :data:`Connector`: a real :class:`AdminFeed`."""
    return await AdminFeed.open(url, token)
