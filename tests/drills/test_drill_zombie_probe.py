"""Drill: a zombie agent found by its probes — heartbeats fine, its handler pool wedged."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from conftest import StateWatch
from subprocs import agent_view

from reach import Agent
from reach.errors import ReachError
from reach.gateway.events import PROBE, Event
from reach.testing import Cluster, wait_until

CAP = "order.write"  # not idempotent: a call lost at the zombie is not retried elsewhere


class LeakyPool:
    """The agent's connection pool: ``leak()`` makes every ``get`` hang (threads and all)
    until ``fix()``, as the leaked pool of the field did."""

    def __init__(self) -> None:
        self.fixed = threading.Event()
        self.fixed.set()

    def leak(self) -> None:
        self.fixed.clear()

    def fix(self) -> None:
        self.fixed.set()

    def get(self) -> None:
        self.fixed.wait(timeout=10)  # (a bound, so a failed drill cannot hang its threads)


async def test_a_wedged_zombie_is_probed_out_before_three_calls_are_lost(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "An agent's heartbeats fine, but a leaked connection pool made every request hang
    (100 ms → 20 s)" → "active probes that exercise real work"; "probe every ~30 s; probes
    slower than 5 s twice → remove". Scaled: probes every 50 ms, slow past 60 ms (30 ms suspected the healthy agent now and then on a loaded machine). A
    non-idempotent zombie (sync handlers on a 2-thread pool, a probe check that takes a pool
    connection as its handlers do) is wedged while its heartbeats go on, beside a healthy
    agent, under steady calls. At most 2 calls are lost at it before two slow probes suspect
    it (``suspected_by: probe``); its heartbeats do not bring it back; traffic moves to the
    healthy agent; after the fix a fast probe restores it and it serves again."""
    # Heartbeats suspect only after 20 missed (1 s): under coverage on a loaded CI machine the
    # healthy agent's beats stalled past 4 (0.2 s); this drill is about probes, not beats.
    cluster = await cluster_factory(probe_interval=0.05, probe_slow=0.06, suspect_after=20,
                                    offline_after=40, max_retries=3, seed=11)
    reach = cluster.reach
    seen: list[Event] = []
    reach.events.listen(lambda e: seen.append(e) if e.kind == PROBE else None)
    pool = LeakyPool()
    zombie = Agent("zombie", max_concurrency=4, threads=2, reconnect_base=0.02)
    healthy = Agent("healthy", max_concurrency=4, threads=2, reconnect_base=0.02)

    @zombie.capability(CAP, latency_ms=200)
    def write_z(n: int) -> dict[str, Any]:
        pool.get()
        return {"agent": "zombie", "n": n}

    @zombie.probe
    def ping_db() -> bool:  # real work: a connection from the pool the handlers use
        pool.get()
        return True

    @healthy.capability(CAP, latency_ms=200)
    def write_h(n: int) -> dict[str, Any]:
        return {"agent": "healthy", "n": n}

    for agent in (zombie, healthy):
        await agent.connect(cluster.url)
        cluster.agents.append(agent)
    assert zombie.probe_interval == 0.05  # granted in the welcome
    client = await cluster.client("shop")
    watch = StateWatch(reach, "zombie")
    ids = itertools.count()
    served: list[str] = []
    lost: list[str] = []  # task ids that went to the zombie and failed there

    async def one() -> None:
        n = next(ids)
        handle = await client.submit(CAP, {"n": n}, idempotency_key=f"w-{n}")
        try:
            served.append((await handle.result(timeout=5))["agent"])
        except ReachError:
            view = await client.status(handle.task_id)
            assert [a["agent"] for a in view["attempts"]] == ["zombie"], view["attempts"]
            lost.append(handle.task_id)

    async def load(until: Callable[[], bool], width: int = 2, limit: float = 10.0) -> None:
        deadline = time.monotonic() + limit

        async def worker() -> None:
            while not until():
                assert time.monotonic() < deadline, "load ran out of time"
                await one()

        await asyncio.gather(*(worker() for _ in range(width)))

    try:
        # 1. Both serve; the zombie's probes are answered fast.
        await load(lambda: served.count("zombie") >= 2 and served.count("healthy") >= 2)
        await wait_until(lambda: (agent_view(reach, "zombie")["probe"] or {}).get("sent", 0) >= 2)
        assert agent_view(reach, "zombie")["state"] == "online" and not lost

        # 2. The pool leaks. Steady calls go on until its probes suspect it.
        pool.leak()
        leaked_at = len(served)
        await load(lambda: agent_view(reach, "zombie")["state"] == "suspected")
        view = agent_view(reach, "zombie")
        assert view["suspected_by"] == "probe", view
        assert view["probe"]["slow_streak"] >= 2, view["probe"]
        assert len(lost) <= 2, f"{len(lost)} calls lost at the zombie before it was suspected"
        assert [e.data["change"] for e in seen] == ["suspected"], seen

        # 3. Suspected: its heartbeats go on and do not bring it back; traffic moves.
        before = len(served)
        lost_before = len(lost)
        await asyncio.gather(*(one() for _ in range(20)))
        assert served[before:] == ["healthy"] * 20 and len(lost) == lost_before
        await wait_until(lambda: agent_view(reach, "zombie")["since_heartbeat_s"] < 0.04)
        assert agent_view(reach, "zombie")["state"] == "suspected"  # a beat came: still out

        # 4. The fix: a fast probe restores it, and it serves again.
        pool.fix()
        await wait_until(lambda: agent_view(reach, "zombie")["state"] == "online")
        assert [e.data["change"] for e in seen] == ["suspected", "restored"], seen
        assert seen[-1].data["probe_ms"] < 30
        assert agent_view(reach, "zombie")["suspected_by"] is None
        after = len(served)
        await load(lambda: "zombie" in served[after:])
        watch.sample()
        assert watch.states == ["online", "suspected", "online"], watch.seen
        print(f"\nzombie probe drill: {len(lost)} call(s) lost at the zombie before its probes "
              f"suspected it; {len(served) - leaked_at} served meanwhile and after; "
              f"probe events {[e.data['change'] for e in seen]}")
    finally:
        pool.fix()
        await watch.stop()
