"""Issue 25 item 5 (the websocket port and the process): at the open-file limit nobody got in.

In the trial 1,009 idle websocket connections at the usual soft limit of 1,024 locked every
caller and the operator out and logged 28 MB of accept errors. Now `reach serve` raises the
soft limit to the hard one, derives its connection caps from the limit minus a reserve, closes
the oldest connection that has not said who it is to make room for a new one, and keeps seats
for the admin feed. These tests run `reach serve` under a low limit (256 open files) and flood
it from this process on loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import websockets
from subprocs import REPO, free_port
from websockets.exceptions import InvalidMessage, InvalidStatus

from dashboard.feed import AdminFeed
from reach import Reach
from reach.server.openfiles import Capacity
from reach.wire.admin import Snapshot

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/PID/limits; RLIMIT_NOFILE as on Linux")

ADMIN = "admin-secret"
TOKENS = {"t-caller": "caller", "t-idle": "idle"}


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    out: Path
    url: str
    port: int

    def log(self) -> str:
        return self.out.read_text(errors="replace")

    def soft_limit(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
        raise AssertionError("no open-file limit in /proc")  # pragma: no cover


async def serve(tmp_path: Path, soft: int, hard: int) -> Served:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    port, out = free_port(), tmp_path / "serve.out"

    def limit() -> None:  # in the child, before it runs: the process starts at this limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reach.cli", "serve", "--port", str(port), "--no-http",
             "--store", "sqlite://", "--tokens-file", str(tokens), "--admin-token", ADMIN,
             "--log-level", "WARNING"],
            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp_path,
            env=env, preexec_fn=limit)
    served = Served(proc, out, f"ws://127.0.0.1:{port}", port)
    deadline = time.monotonic() + 20
    while "coordinator listening" not in served.log():
        assert proc.poll() is None, served.log()
        assert time.monotonic() < deadline, served.log()
        await asyncio.sleep(0.02)
    return served


def stop(served: Served) -> None:
    """SIGTERM (a graceful stop: coverage of the child is written), SIGKILL if it hangs."""
    served.proc.terminate()
    try:
        served.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung coordinator
        served.proc.kill()
        served.proc.wait(timeout=10)


@pytest_asyncio.fixture
async def low(tmp_path: Path) -> AsyncIterator[Served]:
    """`reach serve` whose soft and hard limits are both 256 open files."""
    served = await serve(tmp_path, 256, 256)
    try:
        yield served
    finally:
        stop(served)


async def first_answer(url: str, frame: dict[str, Any], **connect: Any) -> str:
    """Connect, send ``frame``, and return the type of the coordinator's first answer."""
    async with asyncio.timeout(5):
        async with websockets.connect(url, **connect) as ws:
            await ws.send(json.dumps({"v": 1, **frame}))
            return str(json.loads(await ws.recv())["type"])


def log_lines(served: Served) -> list[str]:
    """What the coordinator logged after its start-up banner (it logs WARNING and up)."""
    lines = served.log().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("reach: "))
    return lines[start + 1:]


UPGRADE = ("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "Sec-WebSocket-Version: 13\r\n\r\n")


async def idle_flood(port: int, n: int) -> list[asyncio.StreamWriter]:
    """``n`` sockets that never say who they are: half send nothing at all, half a websocket
    upgrade and then nothing (as bench/hostile.py's flood), 50 at a time."""
    held: list[asyncio.StreamWriter] = []

    async def one(i: int) -> None:
        try:
            async with asyncio.timeout(2):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append(writer)
                if i % 2:
                    writer.write(UPGRADE.format(port=port).encode())
                    await writer.drain()
        except (OSError, TimeoutError):
            pass  # refused or reset: what a coordinator at its limit may do

    for at in range(0, n, 50):
        await asyncio.gather(*(one(i) for i in range(at, min(n, at + 50))))
    return held


def test_the_caps_fit_under_the_limit_with_a_reserve() -> None:
    cap = Capacity.plan(1024, 10_000, 64)
    assert cap.reserve >= 32
    # this port's sockets, and as many for the REST door, leave the reserve free
    assert 2 * cap.sockets + cap.reserve <= 1024
    assert cap.connections + cap.admin <= cap.sockets and cap.admin >= 1
    assert cap.per_address <= cap.unidentified <= cap.sockets
    big = Capacity.plan(1 << 20, 10_000, 64)  # a high limit: the settings decide
    assert big.connections == 10_000 and big.per_address == 64
    small = Capacity.plan(None, 3, 64)  # no limit known (not POSIX)
    assert small.connections == 3 and small.admin >= 1


async def test_serve_raises_the_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    served = await serve(tmp_path, 256, 1024)
    try:
        assert served.soft_limit() == 1024
    finally:
        stop(served)


async def test_idle_sockets_past_the_limit_lock_nobody_out(low: Served) -> None:
    held = await idle_flood(low.port, 400)  # more than the process may have files open
    try:
        assert await first_answer(low.url, {"type": "hello", "caller": "caller",
                                            "token": "t-caller"}) == "welcome"
        assert await first_answer(low.url, {"type": "admin", "token": ADMIN}) == "snapshot"
        more = await idle_flood(low.port, 100)  # and while it goes on
        held += more
        assert await first_answer(low.url, {"type": "admin", "token": ADMIN}) == "snapshot"
        assert low.proc.poll() is None
    finally:
        for writer in held:
            writer.transport.abort()
    lines = log_lines(low)
    assert len(lines) < 20, "\n".join(lines[:40])  # no accept errors, no tracebacks


async def test_past_the_session_cap_an_operator_still_gets_in(low: Served) -> None:
    """Authenticated sessions that sit idle fill the ordinary cap: more are refused (503 at
    the handshake), the process never reaches its file limit, and the admin feed still
    opens for an operator who shows the admin token in the handshake, as the dashboard does."""
    sessions: list[Any] = []
    refused = 0
    try:
        for _ in range(160):  # past what 256 open files could hold beside the rest
            try:
                ws = await websockets.connect(low.url)
            except InvalidStatus as exc:
                assert exc.response.status_code == 503
                refused += 1
                continue
            sessions.append(ws)
            await ws.send(json.dumps({"v": 1, "type": "hello", "caller": "idle",
                                      "token": "t-idle"}))
            await ws.recv()  # welcome
        assert refused > 0 and len(sessions) < 160
        header = {"Authorization": f"Bearer {ADMIN}"}
        for _ in range(2):  # seats are kept for more than one operator
            assert await first_answer(low.url, {"type": "admin", "token": ADMIN},
                                      additional_headers=header) == "snapshot"
        feed = await AdminFeed.open(low.url, ADMIN)  # the dashboard's way in
        try:
            assert isinstance(await feed.receive(), Snapshot)
        finally:
            await feed.close()
        with pytest.raises(InvalidStatus):  # the token in the frame alone waits for room
            await first_answer(low.url, {"type": "admin", "token": ADMIN})
        seats = Capacity.plan(256, 10_000, 64).admin
        for _ in range(seats):  # every seat taken: the port holds all the sockets it may
            ws = await websockets.connect(low.url, additional_headers=header)
            sessions.append(ws)
            await ws.send(json.dumps({"v": 1, "type": "admin", "token": ADMIN}))
            await ws.recv()  # snapshot
        # (refused at the socket cap: reset before its handshake, or 503 when a socket of
        # the refusals before it is still closing)
        with pytest.raises((InvalidStatus, InvalidMessage, OSError)):
            await first_answer(low.url, {"type": "admin", "token": ADMIN},
                               additional_headers=header)
        reader, writer = await asyncio.open_connection("127.0.0.1", low.port)
        try:  # one more socket is closed at once, not held until the process runs out
            async with asyncio.timeout(2):
                assert await reader.read(100) == b""
        except ConnectionResetError:
            pass
        finally:
            writer.transport.abort()
        await asyncio.gather(*(ws.close() for ws in sessions[-seats:]))
        del sessions[-seats:]
        with pytest.raises(InvalidStatus):  # a caller still waits for room
            await first_answer(low.url, {"type": "hello", "caller": "caller",
                                         "token": "t-caller"})
        await sessions.pop().close()  # room again
        await asyncio.sleep(0.05)
        assert await first_answer(low.url, {"type": "hello", "caller": "caller",
                                            "token": "t-caller"}) == "welcome"
        assert low.proc.poll() is None
    finally:
        await asyncio.gather(*(ws.close() for ws in sessions), return_exceptions=True)
    lines = log_lines(low)
    assert len(lines) < 20, "\n".join(lines[:40])


async def test_past_the_unidentified_cap_the_oldest_anywhere_makes_room() -> None:
    """Idle connections from many addresses (127.0.0.1-3 here) are capped together too."""
    async with Reach.start(http_port=None, max_connections=8,
                           max_pending_per_address=2) as reach:
        assert reach.capacity.unidentified == 2
        idle = [await websockets.connect(reach.url, local_addr=(f"127.0.0.{i}", 0))
                for i in (1, 2)]
        try:
            third = await websockets.connect(reach.url, local_addr=("127.0.0.3", 0))
            await idle[0].wait_closed()
            assert idle[0].close_code == 1008 and "not sent hello" in idle[0].close_reason
            assert reach.channel.unidentified == 2 and reach.channel.evicted == 1
            await third.send(json.dumps({"v": 1, "type": "hello", "caller": "c"}))
            assert json.loads(await third.recv())["type"] == "welcome"
            assert reach.channel.unidentified == 1
            await third.close()
        finally:
            await asyncio.gather(*(ws.close() for ws in idle))
