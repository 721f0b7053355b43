"""Keepalive that does not blame a peer for the coordinator's own pacing.

websockets' keepalive closes a connection (1011) when a ping's pong is not back within
``ping_timeout``. But a pong travels behind every frame the peer sent before it, and a
caller session reads a flooding caller's frames only as fast as the store commits them
(``CallerSession._backlog``): while it holds off, websockets pauses the socket's reading and
the pong waits unread. A burst of 20,000 submits that took longer than 40 s to drain (under
coverage on a loaded machine) was closed by the coordinator itself, mid-burst, as if its
caller were dead.

Here a late pong closes the connection only when the peer has sent nothing at all while the
coordinator was reading: a peer whose bytes keep arriving, or whose bytes the coordinator is
not reading, is alive as far as anyone can tell. A silent peer on a socket being read (a
host gone, a process frozen) is still closed after ``ping_interval + ping_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from reach.wire.inbound import Inbound

REASON = "keepalive ping timeout"


class PacedKeepalive(Inbound, ServerConnection):
    """A server connection whose keepalive waits out its own paused reading."""

    chunks = 0  # reads from the socket since it opened (one per ``data_received``)

    def data_received(self, data: bytes) -> None:
        self.chunks += 1
        super().data_received(data)

    async def keepalive(self) -> None:
        """Ping every ``ping_interval``; close when a pong is late and the peer was silent
        on a socket being read for the whole ``ping_timeout``."""
        interval, timeout = self.ping_interval, self.ping_timeout
        assert interval is not None
        latency = 0.0
        with contextlib.suppress(ConnectionClosed):
            while True:
                await asyncio.sleep(max(0.0, interval - latency))
                pong = asyncio.ensure_future(await self.ping())  # (a future already)
                if timeout is None:
                    continue
                sent_at = asyncio.get_running_loop().time()
                while True:
                    seen = self.chunks
                    done, _ = await asyncio.wait({pong}, timeout=timeout)
                    if done:
                        latency = asyncio.get_running_loop().time() - sent_at
                        break
                    if self.chunks == seen and self._reading():
                        await self.close(CloseCode.INTERNAL_ERROR, REASON)
                        return

    def _reading(self) -> bool:
        transport = self.transport
        return bool(transport is not None and not transport.is_closing()
                    and getattr(transport, "is_reading", lambda: True)())
