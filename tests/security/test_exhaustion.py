"""Issue 10, items 6 and 7: no peer can make the coordinator buffer, keep or accept without end,
and one caller's flood cannot starve the others."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import websockets
from security.conftest import StallProbe, echo, start_probe
from websockets.exceptions import InvalidStatus

from reach import Rejected, TaskError
from reach.testing import Cluster, wait_until

PROCS = Path(__file__).resolve().parent.parent / "procs"


async def hello(url: str, caller: str, **options: Any) -> websockets.ClientConnection:
    ws = await websockets.connect(url, max_size=None, **options)
    await ws.send(json.dumps({"v": 1, "type": "hello", "caller": caller}))
    assert json.loads(await ws.recv())["type"] == "welcome"
    return ws


# ---------------------------------------------------------------- item 6: memory


async def test_a_reader_that_stops_reading_is_closed_not_buffered_for(
        caplog: pytest.LogCaptureFixture) -> None:
    """2,000 `status` asks for a task with 450 KB of params from a client that never reads took
    the coordinator from 63 MB to 1.9 GB. Now its unsent bytes are capped: it is closed 1008
    ("slow reader"), and the legitimate pair carries on."""
    # Heartbeats at 0.2 s, not the test default 50 ms: the attack's 25 ms turns under coverage
    # left the probe agent silent for 100-200 ms in slow runs, about the default's threshold.
    cluster = await Cluster.start(max_outbox_bytes=4 << 20, heartbeat_interval=0.2)
    try:
        probe = await start_probe(cluster)

        async def big(blob: str) -> int:
            return len(blob)

        await cluster.add_agent("big", {"blob.size": big})
        owner = await cluster.client("hog")
        handle = await owner.submit("blob.size", {"blob": "x" * 450_000})
        assert await handle.result(5) == 450_000
        probe.start()  # watching the attack, not the setting up of the big task it reads
        # A small receive buffer, and reading paused: the coordinator's writes back up.
        sock = socket.create_connection(("127.0.0.1", cluster.reach.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ws = await hello(cluster.url, "hog", sock=sock)
        ws.transport.pause_reading()
        ask = json.dumps({"v": 1, "type": "status", "id": 1, "task_id": handle.task_id})
        for _ in range(2000):
            await ws.send(ask)
        session = next(s for s in cluster.reach.channel.sessions
                       if getattr(s, "caller", None) == "hog" and s.out.overflowed is False
                       and s.ws.remote_address[1] == sock.getsockname()[1])
        await wait_until(lambda: session.out.overflowed, timeout=5)
        assert session.out._queued == 0  # what waited was dropped, not kept
        ws.transport.resume_reading()
        # The coordinator ends the session: by the close handshake when the reader gets through
        # to the close frame, else by dropping the connection ABORT_AFTER later. (Asserted at
        # the coordinator: this raw client notices a dropped connection only at its keepalive
        # ping, 20 s on, and the probe would be measuring those 20 s of idle loop.)
        await wait_until(lambda: session not in cluster.reach.channel.sessions, timeout=5)
        assert any("closing a slow reader's connection" in r.getMessage()
                   for r in caplog.records)
        await probe.check()
        # The task itself is intact and its owner still reads it.
        assert (await owner.status(handle.task_id))["result"] == 450_000
        ws.transport.abort()
    finally:
        await cluster.close()


async def test_finished_tasks_are_kept_within_a_byte_budget() -> None:
    cluster = await Cluster.start(recent_bytes=2_000_000)
    try:
        async def echo(blob: str) -> str:
            return blob

        await cluster.add_agent("echo", {"blob.echo": echo})
        client = await cluster.client()
        handles = [await client.submit("blob.echo", {"blob": f"{i}" * 100_000})
                   for i in range(30)]
        for h in handles:
            await h.result(5)
        gateway = cluster.reach.gateway
        assert gateway.book._recent_bytes <= 2_000_000
        assert 3 <= len(gateway.recent) < 30  # each task holds ~200 KB (params + result)
        # A task that left memory is read from the store, whole.
        first = await client.status(handles[0].task_id)
        assert first["result"] == "0" * 100_000
    finally:
        await cluster.close()


async def test_dead_letters_leave_memory_by_count_and_age_and_still_replay() -> None:
    cluster = await Cluster.start(dead_letters_max=3, max_retries=0)
    try:
        broken = {"on": True}

        async def write(n: int) -> int:
            if broken["on"]:
                raise RuntimeError("bad deploy")
            return n

        await cluster.add_agent("writer", {"order.write": write})
        client = await cluster.client()
        handles = [await client.submit("order.write", {"n": i}) for i in range(5)]
        for h in handles:
            with pytest.raises(Exception):  # noqa: B017 - each is a dead letter
                await h.result(5)
        reach = cluster.reach
        assert [d["task_id"] for d in reach.dead_letters()] == [h.task_id for h in handles[2:]]
        # Past the retention, the rest leave the list too.
        assert reach.gateway.prune_dead(before=reach.clock.wall() + 1) == 3
        assert reach.dead_letters() == []
        # Their rows stay in the store: status reads them, replay runs them.
        assert (await client.status(handles[0].task_id))["state"] == "dead"
        broken["on"] = False
        view = await reach.replay(handles[0].task_id, wait=5)
        assert view["state"] == "succeeded" and view["result"] == 0
    finally:
        await cluster.close()


async def test_idempotency_keys_in_memory_are_capped(caplog: pytest.LogCaptureFixture) -> None:
    cluster = await Cluster.start(idempotency_keys_max=5)
    try:
        await cluster.add_agent("k", {"k.run": lambda n: n})
        client = await cluster.client()
        for i in range(8):
            await client.call("k.run", {"n": i}, idempotency_key=f"key-{i}")
        assert len(cluster.reach.gateway.keys) <= 5
        assert any("forgotten early" in r.getMessage() for r in caplog.records)
        again = await client.submit("k.run", {"n": 7}, idempotency_key="key-7")
        assert again.duplicate  # the newest keys are still known
    finally:
        await cluster.close()


# ---------------------------------------------------------------- item 7: connections


async def test_connections_that_never_say_hello_are_capped_per_address(
        cluster: Cluster, probe: StallProbe) -> None:
    """Past the cap the *oldest* idle connection of that address is closed (1008), not the
    newcomer: a flood churns through its own sockets, while a real peer behind the same
    address (NAT, this host), which sends its first frame at once, still gets in."""
    limit = cluster.reach.settings.max_pending_per_address
    idle = [await websockets.connect(cluster.url) for _ in range(limit)]
    try:
        await wait_until(lambda: cluster.reach.channel.unidentified == limit)
        extra = await websockets.connect(cluster.url)
        await idle[0].wait_closed()
        assert idle[0].close_code == 1008 and "have not sent hello" in idle[0].close_reason
        assert cluster.reach.channel.unidentified == limit
        await extra.send(json.dumps({"v": 1, "type": "hello", "caller": "late"}))
        assert json.loads(await extra.recv())["type"] == "welcome"
        await extra.close()
        await probe.check()  # already-connected peers are not affected
    finally:
        await asyncio.gather(*(ws.close() for ws in idle))


async def test_a_first_frame_that_never_comes_times_out() -> None:
    cluster = await Cluster.start(hello_timeout=0.05)
    try:
        ws = await websockets.connect(cluster.url)
        await ws.wait_closed()
        assert cluster.reach.channel.open == 0
    finally:
        await cluster.close()


async def test_past_the_connection_cap_the_upgrade_is_refused_with_503() -> None:
    cluster = await Cluster.start(max_connections=3)
    try:
        held = [await hello(cluster.url, f"c{i}") for i in range(3)]
        with pytest.raises(InvalidStatus) as refused:
            await websockets.connect(cluster.url)
        assert refused.value.response.status_code == 503
        assert b"connection limit" in refused.value.response.body
        await held[0].close()
        await wait_until(lambda: cluster.reach.channel.open < 3)
        (await hello(cluster.url, "again")).transport.abort()  # room again
        for ws in held[1:]:
            await ws.close()
    finally:
        await cluster.close()


async def test_a_dead_peer_is_dropped_by_keepalive_pings() -> None:
    cluster = await Cluster.start(ping_interval=0.02, ping_timeout=0.02)
    try:
        ws = await hello(cluster.url, "silent", ping_interval=None)
        ws.transport.pause_reading()  # it stops answering pings (as a dead host would)
        await wait_until(lambda: cluster.reach.channel.open == 0, timeout=3)
        ws.transport.abort()
    finally:
        await cluster.close()


# ---------------------------------------------------------------- item 7: one caller's flood


@pytest.mark.timeout(150)
async def test_a_burst_of_submits_from_one_caller_does_not_freeze_the_loop(
        cluster: Cluster, probe: StallProbe) -> None:
    """50,000 submits from one caller in 0.6 s starved every other caller (5 s connect timeouts).
    Here another process sends 20,000 back to back on one connection: the session yields every
    few frames, so the legitimate pair on another agent keeps answering fast, and every submit
    is answered."""
    # The flooded agent and the attacker are processes of their own, as they would be: the
    # probe measures the coordinator's loop, not theirs.
    bulk = await asyncio.create_subprocess_exec(
        sys.executable, str(PROCS / "agent.py"), cluster.url, "bulk", "--capability",
        "bulk.work", "--max-concurrency", "100", "--min-ms", "20", "--max-ms", "50")
    try:
        await wait_until(lambda: "bulk.work" in cluster.reach.registry.index, timeout=20)
        await _burst(cluster, probe)
    finally:
        bulk.kill()
        await bulk.wait()


async def _burst(cluster: Cluster, probe: StallProbe) -> None:
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, str(PROCS / "burst.py"), cluster.url, "--count", "20000",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        # ~12 s alone; under coverage on a loaded two-core CI machine it passed 40 s once.
        # The bound is against a hang, not a speed check (the probe measures the loop).
        out, err = await asyncio.wait_for(attacker.communicate(), timeout=120)
    finally:
        if attacker.returncode is None:
            attacker.kill()
            await attacker.wait()
    assert attacker.returncode == 0 and out, (
        f"the attacker exited {attacker.returncode} before counting its answers: "
        f"{err.decode(errors='replace')[-2000:]}")
    answers = json.loads(out)
    assert sum(answers.values()) == 20_000 and answers.get("accepted", 0) > 0, answers
    await probe.check(saturated=True)


@pytest.mark.timeout(180)
async def test_the_keepalive_does_not_close_a_caller_whose_frames_it_is_still_reading() -> None:
    """A pong travels behind every frame sent before it, and the session reads a burst only
    as fast as the store commits it: websockets' own keepalive closed such a caller (1011,
    "keepalive ping timeout") once the drain outlasted ping interval + timeout (40 s of a
    burst under coverage). Here a ping every 0.5 s, 3 s for its pong: 30,000 submits drain
    for longer than that (about 5 s alone on a fast machine, where 14,000 took 2.3-2.7 s once
    a call got cheaper, too short to test anything; websockets' own rule would close the
    caller after 3.5 s) and the caller stays, while a silent peer is still dropped (the test
    above). (At
    0.2 s, 1 s, then 2 s, a caller starved of CPU under coverage on a loaded or slow machine
    sent nothing, pong included, for longer than that: dead by any rule, and a flaky test.)"""
    cluster = await Cluster.start(ping_interval=0.5, ping_timeout=3.0)
    try:
        await cluster.add_agent("bulk", {"bulk.work": echo}, max_concurrency=100)
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, str(PROCS / "burst.py"), cluster.url, "--count", "30000",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        started = asyncio.get_running_loop().time()
        out, err = await asyncio.wait_for(attacker.communicate(), timeout=150)
        took = asyncio.get_running_loop().time() - started
        assert attacker.returncode == 0, err.decode(errors="replace")[-2000:]
        assert sum(json.loads(out).values()) == 30000
        assert took > 3.5, f"the burst drained in {took:.2f} s: no pong was late during it"
    finally:
        await cluster.close()


async def test_one_caller_cannot_hold_more_than_its_share_of_unfinished_tasks() -> None:
    cluster = await Cluster.start(max_caller_tasks=20, queue_wait=5.0)
    try:
        gate = asyncio.Event()

        async def hold(n: int) -> int:
            await gate.wait()
            return n

        await cluster.add_agent("slow", {"slow.hold": hold}, max_concurrency=5)
        hog = await cluster.client("hog")
        held = [await hog.submit("slow.hold", {"n": i}) for i in range(20)]
        with pytest.raises(Rejected, match="unfinished tasks, its limit") as refused:
            await hog.submit("slow.hold", {"n": 99})
        assert refused.value.level == 1.0
        other = await cluster.client("other")  # another caller still gets in
        theirs = await other.submit("slow.hold", {"n": -1})
        gate.set()
        assert await theirs.result(5) == -1
        assert [await h.result(5) for h in held] == list(range(20))
    finally:
        await cluster.close()


async def test_a_flooding_caller_does_not_push_others_out_of_a_shared_agent(
        cluster: Cluster) -> None:
    """Slots freed at a saturated agent go to the least busy waiting caller first: a caller
    with one call in flight is served while a flood of another caller's waits its turn."""
    async def work(n: int) -> int:
        await asyncio.sleep(0.01)
        return n

    await cluster.add_agent("shared", {"shared.work": work}, max_concurrency=2)
    flood = await cluster.client("flood")
    alice = await cluster.client("alice")
    flooding = [asyncio.create_task(flood.call("shared.work", {"n": i}, max_retries=0))
                for i in range(200)]
    await asyncio.sleep(0.02)  # the flood is queued
    served = 0
    for i in range(10):
        assert await alice.call("shared.work", {"n": i}, max_retries=0) == i
        served += 1
    outcomes = await asyncio.gather(*flooding, return_exceptions=True)
    assert served == 10
    # The flood itself got what the agent could do; the rest was told to slow down.
    assert all(isinstance(o, int | Rejected | TaskError) for o in outcomes)
    assert any(isinstance(o, Rejected) for o in outcomes)
