"""A loopback TCP relay for drills: what a network between two processes can do to them.

``hold()`` stops moving bytes both ways while the sockets stay open (a blip: nothing arrives,
nothing is closed) and ``release()`` lets what queued up flow again, in order; ``cut()`` stops
listening and resets every carried connection (a partition: new connections are refused, open
ones reset) and ``start()`` listens again on the same port. ``Blip`` (tests/drills/conftest.py)
and ``PgProxy`` (tests/drills/cluster_rig.py) are this relay with their own URLs.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

R = TypeVar("R", bound="Relay")


class Relay:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.target_port = host, target_port
        self.port = 0
        self.cuts = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    async def start(self: R) -> R:
        """Listen (again, after a cut, on the same port)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        loop = asyncio.get_running_loop()
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pump = loop.create_task(self._pump(src, dst))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(65536)
                await self._flowing.wait()  # held: the bytes wait here, the socket stays open
                if not data:
                    break
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)

    async def cut(self) -> None:
        """Stop listening and reset every carried connection, both ways."""
        self.cuts += 1
        await self._stop(reset=True)

    async def close(self) -> None:
        """Let held bytes go, stop listening, close every carried connection."""
        self.release()
        await self._stop(reset=False)

    async def _stop(self, *, reset: bool) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            if reset:
                writer.transport.abort()  # RST now: no half-closed socket lingers
            else:
                writer.close()
        self._writers.clear()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
