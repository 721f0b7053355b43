"""Drill: a coordinator is cut off from the cluster's PostgreSQL while it holds agents."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from cluster_rig import (
    HEARTBEAT,
    LEASE,
    Load,
    PgProxy,
    Runs,
    all_nodes,
    leases,
    live_nodes,
    query,
    start_node,
    stored_when_settled,
    until,
    worker,
)
from subprocs import Proc

from reach import Agent, Client, ReachError

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
              pytest.mark.timeout(60)]

FIRST, AFTER, WIDTH = 200, 60, 12


async def test_a_node_cut_off_from_the_database_stops_acknowledging_and_splits_no_brain(
        spawn: Callable[..., Proc], pg_url: str) -> None:
    """Field: "The coordinator leaked memory and died: everyone lost everyone for an hour." —
    here the partial version a cluster adds: the node lives, the database is out of its reach.
    Node P reaches PostgreSQL only through a TCP proxy in this process; node A directly. Agents
    and callers know both. Under load the proxy is cut (its listening socket closed, every
    connection it carried reset). P cannot renew its lease: it fences itself (refuses new
    work and new connections, closes its agents' and callers' connections) and A, once P's
    lease ran out, takes P's unfinished tasks over. Then the proxy listens again: P rejoins
    under its node id and more load runs over both. Asserted: every task P acknowledged is in
    the database (P acknowledged nothing it could not store), a caller that insists on P is
    refused while it is fenced, every acknowledged task ends with its result, no key's handler
    ran twice (before, during or after the partition: one brain), P's agents are held by A."""
    async with AsyncExitStack() as stack:
        proxy = await PgProxy(pg_url).start()
        stack.push_async_callback(proxy.close)
        p_proc, p_url = await start_node(spawn, "node-p", proxy.url)
        a_proc, a_url = await start_node(spawn, "node-a", pg_url)
        await until(lambda: len(live_nodes(pg_url)) == 2, 20, 0.05)
        p_id = {u: n for n, u in all_nodes(pg_url).items()}[p_url]
        runs = Runs()
        agents: list[Agent] = []
        # Agents start on a random node of the two: add them until P holds at least two.
        while sum(a.url == p_url for a in agents) < 2 or len(agents) < 4:
            assert len(agents) < 16, "the agents' random start never chose node P"
            agent = worker(f"worker-{len(agents)}", runs)
            await stack.enter_async_context(agent.connect([p_url, a_url]))
            agents.append(agent)
        await until(lambda: all(a.online.is_set() for a in agents))
        on_p = [a for a in agents if a.url == p_url]
        on_p_client = await stack.enter_async_context(
            Client.connect([p_url, a_url], caller="drill", reconnect_for=30))
        on_a_client = await stack.enter_async_context(
            Client.connect([a_url, p_url], caller="drill", reconnect_for=30))
        assert on_p_client.url == p_url and on_a_client.url == a_url

        load = Load([on_p_client, on_a_client], FIRST, WIDTH)
        cut: dict[str, Any] = {}
        moved_at: dict[str, float] = {}

        async def partition() -> None:
            await until(lambda: len(load.results) >= 60, 40, 0.002)
            await proxy.cut()
            cut["at"] = time.monotonic()
            cut["stranded"] = [k for k, u in load.acked_by.items()
                               if u == p_url and k not in load.results]
            took_over = asyncio.ensure_future(a_proc.wait_for("took over", timeout=10 * LEASE))
            await p_proc.wait_for("is fenced", timeout=10 * LEASE)
            cut["fenced"] = time.monotonic()
            while len(moved_at) < len(on_p):
                for a in on_p:
                    if a.name not in moved_at and a.online.is_set() and a.url == a_url:
                        moved_at[a.name] = time.monotonic()
                await asyncio.sleep(0.005)
            # A caller that insists on the fenced node is refused: it acknowledges nothing.
            with pytest.raises(ReachError) as refused:
                async with Client.connect(p_url, caller="drill", reconnect_for=0.2) as c:
                    await c.submit("drill.work", {"n": -1}, idempotency_key="never")
            cut["refused"] = refused.value.code
            try:  # (P may have had nothing unfinished: then nothing is taken over)
                await took_over
                cut["took_over"] = time.monotonic()
            except AssertionError:
                cut["took_over"] = None

        await asyncio.gather(load.run(), partition())
        assert load.errors == {}, load.errors
        assert set(load.results) == set(load.acked) == {load.key(n) for n in range(FIRST)}
        # Everything P acknowledged is stored (it acknowledged nothing after its lease ended:
        # an insert it could not commit was never acknowledged).
        stored = {k.removeprefix("drill/"): s for k, s in query(
            pg_url, "SELECT idempotency_key, state FROM reach_tasks")}
        by_p = {k for k, u in load.acked_by.items() if u == p_url}
        assert by_p <= set(stored) and by_p, "node P acknowledged a task it did not store"
        late = [k for k in by_p if load.acked_at[k] > cut["fenced"]]
        assert late == [], f"node P acknowledged tasks after it was fenced: {late}"
        assert "never" not in stored and "drill/never" not in stored
        assert p_id not in live_nodes(pg_url)
        assert {a.url for a in on_p} == {a_url}, "P's agents did not move to node A"

        # The partition heals: P rejoins under its node id and takes work again.
        await proxy.heal()
        await p_proc.wait_for("is back in the cluster", timeout=10 * LEASE)
        await until(lambda: p_id in live_nodes(pg_url), 10, 0.05)
        back = await stack.enter_async_context(
            Client.connect([p_url, a_url], caller="drill", reconnect_for=30))
        assert back.url == p_url, "the healed node refused a caller"
        after = Load([back, on_a_client], AFTER, WIDTH, prefix="after")
        await after.run()
        assert after.errors == {} and len(after.results) == AFTER
        stored = await stored_when_settled(pg_url, FIRST + AFTER)
        assert len(stored) == FIRST + AFTER
        assert runs.twice() == {}, (f"keys run twice: {runs.twice()}",
                                    [r for r in runs.log if r[0] in runs.twice()])
        assert set(runs.by_key) == {k.removeprefix("drill/") for k in stored}

        beats = sorted((t - cut["fenced"]) / HEARTBEAT for t in moved_at.values())
        took = max((load.done_at[k] - cut["at"] for k in cut["stranded"]), default=0.0)
        print(f"\ncluster partition: {FIRST}+{AFTER} tasks; {len(by_p)} acknowledged by P, "
              f"{len(cut['stranded'])} of them unfinished at the cut, the last done "
              f"{took / LEASE:.1f} leases after it; A took P's tasks over "
              f"{leases(cut['took_over'], cut['at'])} leases after the cut; P fenced {cut['fenced'] - cut['at']:.2f}s "
              f"after the cut (lease {LEASE:.0f}s); {len(on_p)} agent(s) moved in "
              f"{', '.join(f'{b:.1f}' for b in beats)} heartbeats after the fence "
              f"({HEARTBEAT * 1000:.0f} ms); a caller on P refused with {cut['refused']!r}; "
              f"submit retries {dict(load.refused)}; runs {sum(runs.by_key.values())} of "
              f"{len(runs.by_key)} keys")
        assert max(beats) <= 20, beats
