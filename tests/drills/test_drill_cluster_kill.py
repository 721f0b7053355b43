"""Drill: one of three coordinators on one PostgreSQL is SIGKILLed under load (issue 15)."""

from __future__ import annotations

import asyncio
import collections
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
    Runs,
    admin_snapshot,
    all_nodes,
    leases,
    live_nodes,
    rotated,
    start_node,
    stored_when_settled,
    until,
    worker,
)
from subprocs import Proc

from reach import Agent, Client

pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
              pytest.mark.timeout(60)]

TOTAL, WIDTH, AGENTS = 300, 24, 6


async def test_a_killed_node_loses_nothing_acknowledged_and_runs_no_key_twice(
        spawn: Callable[..., Proc], pg_url: str) -> None:
    """Field: "The coordinator leaked memory and died: everyone lost everyone for an hour."
    Lesson, for a cluster: the other nodes carry on. Three ``reach serve --cluster`` processes
    share one PostgreSQL; six agents and three callers in this process know all three URLs
    (callers start one per node, agents wherever their random start puts them). 300 tasks go in,
    each under its own idempotency key, 24 at a time; once 100 have results one node is
    SIGKILLed. Its lease runs out, a survivor takes its unfinished tasks over and drives them,
    its agents register with the survivors, its callers move there and keep waiting on their
    handles.

    "Exactly once" here: every acknowledged task (``submit`` returned) yields its result to
    its caller, 0 lost, and no key's handler runs twice at the agents. A task the dead node had
    dispatched may be dispatched again after the take-over; it goes to the agent that holds the
    key (still the same ``Agent`` object, reconnected), whose key cache answers it without
    running the handler again: so the handler count per key, counted inside the handler, is 1.
    """
    async with AsyncExitStack() as stack:
        nodes = [await start_node(spawn, f"node-{i}", pg_url) for i in range(3)]
        urls = [url for _, url in nodes]
        await until(lambda: len(live_nodes(pg_url)) == 3, 20, 0.05)
        ids = {url: node for node, url in all_nodes(pg_url).items()}
        runs = Runs()
        agents: list[Agent] = []
        for j in range(AGENTS):
            agent = worker(f"worker-{j}", runs, work_s=0.05)
            await stack.enter_async_context(agent.connect(urls))
            agents.append(agent)
        await until(lambda: all(a.online.is_set() for a in agents))
        clients = [await stack.enter_async_context(
            Client.connect(rotated(urls, i), caller="drill", reconnect_for=30)) for i in range(3)]
        # Kill the node holding the most agents (at least one: six agents on three nodes).
        held = collections.Counter(a.url for a in agents)
        victim_url = max(urls, key=lambda u: held[u])
        victim, victim_id = nodes[urls.index(victim_url)][0], ids[victim_url]
        moved = [a for a in agents if a.url == victim_url]
        assert moved
        # Every node sees all six agents before the load starts (through its peers).
        for url in urls:
            async def seen(url: str = url) -> bool:
                return len((await admin_snapshot(url))["agents"]) == AGENTS
            await _until_async(seen)

        load = Load(clients, TOTAL, WIDTH)
        kill: dict[str, Any] = {}
        back_at: dict[str, float] = {}

        async def chaos() -> None:
            await until(lambda: len(load.results) >= 100, 40, 0.002)
            victim.kill9()
            kill["at"] = time.monotonic()
            survivors = [p for p, u in nodes if u != victim_url]
            took_over = [asyncio.ensure_future(p.wait_for("took over", timeout=10 * LEASE))
                         for p in survivors]
            kill["in_flight"] = len(load.acked) - len(load.results)
            kill["stranded"] = [k for k, u in load.acked_by.items()
                                if u == victim_url and k not in load.results]
            kill["on_victim"] = len(kill["stranded"])
            while len(back_at) < len(moved):
                for a in moved:
                    if a.name not in back_at and a.online.is_set() and a.url != victim_url:
                        back_at[a.name] = time.monotonic()
                await asyncio.sleep(0.005)
            # (the killed node may have had nothing unfinished: then nothing is taken over)
            done, _ = await asyncio.wait(took_over, return_when=asyncio.FIRST_COMPLETED)
            for f in took_over:
                f.cancel()
            ok = [f for f in done if not f.cancelled() and f.exception() is None]
            kill["took_over"] = time.monotonic() if ok else None

        started = time.monotonic()
        await asyncio.gather(load.run(), chaos())
        elapsed = time.monotonic() - started

        # Every acknowledged task ended once: its result came back to its caller.
        assert sorted(load.acked) == [load.key(n) for n in range(TOTAL)]
        assert load.errors == {}, load.errors
        assert set(load.results) == set(load.acked), "an acknowledged task was lost"
        assert all(load.results[load.key(n)]["n"] == n for n in range(TOTAL))
        assert runs.twice() == {}, (f"keys run twice: {runs.twice()}", [
            r for r in runs.log if r[0] in runs.twice()], kill)
        assert set(runs.by_key) == {f"drill/{k}" for k in load.acked} or \
            set(runs.by_key) == set(load.acked)
        assert len(await stored_when_settled(pg_url, TOTAL)) == TOTAL

        assert kill["in_flight"] > 0, "the kill hit nothing in flight"
        # The dead node's agents registered elsewhere within a few heartbeats; its lease ran
        # out, a survivor took its unfinished tasks over and removed its row.
        beats = {n: (t - kill["at"]) / HEARTBEAT for n, t in back_at.items()}
        assert max(beats.values()) <= 20, beats
        await until(lambda: victim_id not in all_nodes(pg_url), 10, 0.05)
        assert len(live_nodes(pg_url)) == 2
        # What the survivors show (their admin feed, what reach-dash draws): every agent, none
        # held by the dead node.
        survivors = [u for u in urls if u != victim_url]
        for url in survivors:
            async def gone(url: str = url) -> bool:
                snap = await admin_snapshot(url)
                holders = {a["name"]: a["node"] for a in snap["agents"]
                           if a["state"] == "online"}
                return len(holders) == AGENTS and victim_id not in holders.values()
            await _until_async(gone)
        took = max((load.done_at[k] - kill["at"] for k in kill["stranded"]), default=0.0)
        print(f"\ncluster SIGKILL: {TOTAL} tasks in {elapsed:.2f}s, {kill['in_flight']} "
              f"acknowledged and unfinished at the kill ({kill['on_victim']} acknowledged by "
              f"the killed node, the last of them done {took / LEASE:.1f} leases after the kill; taken over {leases(kill['took_over'], kill['at'])} leases after it), {len(moved)} agent(s) moved in "
              f"{', '.join(f'{b:.1f}' for b in sorted(beats.values()))} heartbeats "
              f"({HEARTBEAT * 1000:.0f} ms; lease {LEASE:.0f} s), submit retries "
              f"{dict(load.refused)}, runs {sum(runs.by_key.values())} of {len(runs.by_key)} "
              f"keys")


async def _until_async(check: Callable[[], object], limit: float = 20.0) -> None:
    async with asyncio.timeout(limit):
        while not await check():  # type: ignore[misc]
            await asyncio.sleep(0.05)
