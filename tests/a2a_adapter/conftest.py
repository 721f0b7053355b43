"""An A2A agent written with the official a2a-sdk, served on a loopback port: in this process
(``served``) or as its own process that can be killed and comes back (``Supervised``)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import uvicorn
from a2a_adapter.remote_agent import Remote, app

AGENT = str(Path(__file__).with_name("remote_agent.py"))
FAST: dict[str, Any] = dict(heartbeat_interval=0.5, ack_timeout=1.0, recovery_grace=0.2,
                            drain_timeout=0.5)


@asynccontextmanager
async def served(executor: Remote, card_url: str | None = None) -> AsyncIterator[str]:
    """Serve ``executor`` on 127.0.0.1 (port 0) under uvicorn; yields its base URL. The card
    names ``card_url`` as its interface when given (a card pointing elsewhere)."""
    sock = socket.socket()
    # uvicorn leaves a socket it is handed as it is: without TCP_NODELAY each kept-alive
    # request waited ~40 ms on the peer's delayed ACK
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(app(card_url or url, executor),
                                           log_level="warning"))
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.005)
        yield url
    finally:
        server.should_exit = True
        await serving
        sock.close()


class Supervised:
    """The agent as a process of its own on one port, started again whenever it exits (it
    kills itself mid-task in the fault drills); ``starts`` counts its starts."""

    def __init__(self, markers: Path, streaming: bool = False) -> None:
        self.markers = markers
        self.streaming = streaming
        self.port = 0
        self.starts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def _start(self) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, AGENT, str(self.port), str(self.markers),
            *(["stream"] if self.streaming else []), stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
        except BaseException:  # cancelled while it started (the test ended): not left behind
            process.kill()
            await process.wait()
            raise
        self.port, self._process = int(line), process
        self.starts += 1

    async def _keep(self) -> None:
        while True:
            assert self._process is not None
            await self._process.wait()
            await self._start()

    async def __aenter__(self) -> Supervised:
        await self._start()
        self._watch = asyncio.get_running_loop().create_task(self._keep())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._watch is not None
        self._watch.cancel()
        with suppress(asyncio.CancelledError):
            await self._watch
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
