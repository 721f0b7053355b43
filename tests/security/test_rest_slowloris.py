"""Issue 25, item 5 (HTTP part): slow-loris on the REST port.

Before: the REST port had no header, body or idle timeout and no cap per address or in all:
1,400 unauthenticated sockets that sent nothing, half a head or a trickled body were never
closed, and took the process to its file limit (locking out websocket callers too). Now the
HTTP port has the websocket port's defences: a first-head timeout (``hello_timeout``), a body
timeout (``http_body_timeout``), an idle timeout (``http_idle_timeout``), a cap per address on
connections that have not made an identified request (``max_pending_per_address``, past it
the address's longest-waiting one is closed), and a connection cap (``max_connections``) that
first closes the longest-idle connection.

Timeouts are milliseconds here; every wait is bounded with a wide margin, and the attackers
connect from 127.0.0.2 so the legitimate caller on 127.0.0.1 is another address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest_asyncio
from security.conftest import StallProbe, start_probe
from security.rest_raw import answer, closed, connect, head, port_of, shut

from reach.testing import Cluster

ATTACKER = "127.0.0.2"  # loopback too (127/8), another address than the legitimate caller's


async def attacker(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))


async def legitimate_call(port: int, n: int = 1, caller: str = "alice") -> int:
    """A whole call over the REST port from 127.0.0.1; its HTTP status."""
    reader, writer = await connect(port)
    try:
        body = json.dumps({"n": n}).encode()
        writer.write(head("POST", "/v1/call/probe.echo", {
            "Content-Type": "application/json", "Content-Length": len(body),
            "X-Reach-Caller": caller}) + body)
        status, _, answered = await answer(reader)
        if status == 200:
            assert answered["result"] == n
        return status
    finally:
        shut(writer)


@pytest_asyncio.fixture
async def slow() -> AsyncIterator[tuple[Cluster, StallProbe]]:
    cluster = await Cluster.start(hello_timeout=0.2, http_body_timeout=0.2,
                                  http_idle_timeout=0.3)
    try:
        probe = await start_probe(cluster)
        yield cluster, probe
        await probe.stop()
    finally:
        await cluster.close()


async def test_silent_half_headed_trickling_and_idle_sockets_are_closed_in_time(
        slow: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = slow
    port = port_of(cluster.reach)
    probe.start()
    opened: list[asyncio.StreamWriter] = []
    try:
        silent = [await attacker(port) for _ in range(20)]
        half = [await attacker(port) for _ in range(20)]
        for _, w in half:
            w.write(b"POST /v1/call/probe.echo HTTP/1.1\r\nHost: x\r\nContent-Le")
        trickle_r, trickle_w = await attacker(port)
        trickle_w.write(head("POST", "/v1/call/probe.echo", {
            "Content-Type": "application/json", "Content-Length": 1000}) + b"{")
        idle_r, idle_w = await attacker(port)
        idle_w.write(head("GET", "/healthz"))
        assert (await answer(idle_r))[0] == 200  # answered, then kept alive, then silent
        opened += [w for _, w in silent + half] + [trickle_w, idle_w]

        async def trickling() -> None:
            with contextlib.suppress(ConnectionError):
                while not trickle_w.is_closing():
                    trickle_w.write(b" ")
                    await asyncio.sleep(0.02)

        dribble = asyncio.ensure_future(trickling())
        # The legitimate caller gets in meanwhile.
        assert await legitimate_call(port) == 200
        status, _, problem = await answer(trickle_r, 2.0)  # the body took too long: 408
        assert (status, problem["code"]) == (408, "protocol_error")
        assert "http_body_timeout" in problem["detail"]
        waits = [closed(r, 2.0) for r, _ in silent + half] + [closed(trickle_r, 2.0),
                                                              closed(idle_r, 2.0)]
        assert all(await asyncio.gather(*waits)), "a slow socket was not closed in time"
        dribble.cancel()
        assert await legitimate_call(port, 2) == 200
    finally:
        for w in opened:
            shut(w)
    await probe.check()


@pytest_asyncio.fixture
async def capped() -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    """Start coordinators with the options a test names; each is closed after it."""
    clusters: list[Cluster] = []

    async def start(**options: object) -> Cluster:
        cluster = await Cluster.start(**options)
        clusters.append(cluster)
        return cluster

    yield start
    for c in clusters:
        await c.close()


async def test_one_address_holds_at_most_its_unidentified_connections(
        capped: Callable[..., Awaitable[Cluster]]) -> None:
    """Past the cap the address's longest-waiting unidentified connection is closed for the
    new one: the flood churns through its own sockets, and a real caller behind the same
    address (a NAT, this host) still gets in."""
    cluster = await capped(max_pending_per_address=3)
    await start_probe(cluster)
    port = port_of(cluster.reach)
    socks = [await attacker(port) for _ in range(8)]
    try:
        gone = await asyncio.gather(*(closed(r, 1.0) for r, _ in socks[:5]))
        assert all(gone), "the oldest unidentified connections were not closed"
        kept = await asyncio.gather(*(closed(r, 0.1) for r, _ in socks[5:]))
        assert not any(kept), "the newest three should be held"
        # A real caller on the same address gets in, and once identified no longer counts.
        reader, writer = await attacker(port)
        socks.append((reader, writer))
        writer.write(head("GET", "/v1/capabilities", {"X-Reach-Caller": "bob"}))
        assert (await answer(reader))[0] == 200
        assert await closed(socks[5][0], 1.0)
        socks += [await attacker(port) for _ in range(3)]  # they push each other out, not bob
        writer.write(head("GET", "/v1/capabilities", {"X-Reach-Caller": "bob"}))
        assert (await answer(reader))[0] == 200
        assert await legitimate_call(port) == 200  # and another address is not held back
    finally:
        for _, w in socks:
            shut(w)


async def test_at_the_connection_cap_the_longest_idle_goes_and_then_503(
        capped: Callable[..., Awaitable[Cluster]]) -> None:
    cluster = await capped(max_connections=6)
    release = asyncio.Event()

    async def hold() -> str:
        await release.wait()
        return "released"

    await start_probe(cluster)
    await cluster.add_agent("holder", {"hold.run": hold})
    port = port_of(cluster.reach)
    socks = [await attacker(port) for _ in range(6)]  # silent: the cap is reached
    try:
        assert await legitimate_call(port) == 200  # room made: the oldest silent one went
        assert await closed(socks[0][0], 1.0)
        # Six callers each hold one long poll: every connection answers a request.
        polls = []
        for i in range(6):
            reader, writer = await connect(port)
            socks.append((reader, writer))
            body = json.dumps({"capability": "hold.run", "params": {}}).encode()
            writer.write(head("POST", "/v1/tasks", {
                "Content-Type": "application/json", "Content-Length": len(body),
                "X-Reach-Caller": f"c{i}"}) + body)
            status, _, accepted = await answer(reader)
            assert status == 202
            writer.write(head("GET", f"/v1/tasks/{accepted['task_id']}?wait=30",
                              {"X-Reach-Caller": f"c{i}"}))
            polls.append(reader)
        await asyncio.sleep(0.05)  # (the polls' heads reach their routes)
        reader, writer = await connect(port)
        socks.append((reader, writer))
        status, headers, problem = await answer(reader, 2.0)  # nothing idle to close: 503
        assert (status, problem["code"]) == (503, "unavailable")
        assert headers["retry-after"] == "1" and await closed(reader, 1.0)
        release.set()  # the polls are answered; the door has room again
        for r in polls:
            status, _, view = await answer(r, 5.0)
            assert (status, view["state"]) == (200, "succeeded")
        assert await legitimate_call(port, 3) == 200
    finally:
        release.set()
        for _, w in socks:
            shut(w)
