"""A fake coordinator on loopback for the SDK tests: each connection runs a script, and every
frame the SDK sends is recorded, so a test can make the coordinator misbehave exactly and
check what went over the wire."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed


class Peer:
    """One SDK connection as the fake coordinator sees it: ``got`` is every frame received
    (``raw`` the same, as sent)."""

    def __init__(self, ws: ServerConnection, n: int) -> None:
        self.ws, self.n = ws, n
        self.got: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.done = asyncio.Event()

    async def recv(self) -> dict[str, Any]:
        raw = await self.ws.recv()
        assert isinstance(raw, str)
        self.raw.append(raw)
        self.got.append(json.loads(raw))
        return self.got[-1]

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps({"v": 1, **frame}))


class FakeCoordinator:
    """The n-th connection runs ``scripts[n]`` (the last one after that) with a ``peer``."""

    peer: ClassVar[type[Peer]] = Peer

    def __init__(self, *scripts: Callable[[Any], Awaitable[None]]) -> None:
        self.scripts = scripts
        self.peers: list[Any] = []

    async def __aenter__(self) -> FakeCoordinator:
        self.server = await serve(self._run, "127.0.0.1", 0, compression=None)
        self.url = f"ws://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop listening and drop every connection: the coordinator is gone."""
        self.server.close()
        await self.server.wait_closed()

    async def _run(self, ws: ServerConnection) -> None:
        peer = self.peer(ws, len(self.peers))
        self.peers.append(peer)
        try:
            await self.scripts[min(peer.n, len(self.scripts) - 1)](peer)
        except ConnectionClosed:
            pass
        finally:
            peer.done.set()
