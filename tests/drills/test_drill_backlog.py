"""Drill: a task queue's promises (issue 27). Accepted work waits its turn, for a free slot or
for an agent, and is never refused after it was accepted; a full backlog refuses at the door.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from conftest import start_fault_agent
from subprocs import Proc, free_port, start_coordinator

from reach import Client, Rejected
from reach.testing import Cluster, wait_until

JOB = "report.build"


async def test_a_burst_past_every_slot_waits_its_turn_and_runs_by_priority(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Issue 27, "accepted, then refused": eight ``submit("report.build")`` to one agent with
    ``max_concurrency=4`` and a 20 s capability; four ran, and four were durably accepted and
    came back ``Rejected`` 200 ms later ("a batch of 100 report jobs loses 96"). Scaled: 100
    submits of priorities 0–9 to a 4-slot agent whose first four jobs hold their slots until
    all 100 are in. All 100 complete, none is rejected, and the 96 that waited ran highest
    priority first (ageing set low, so that priority and not age decides here)."""
    cluster = await cluster_factory(priority_aging=0.01)
    release = asyncio.Event()
    ran: list[int] = []

    async def build(n: int, priority: int) -> dict[str, int]:
        ran.append(priority)
        if len(ran) <= 4:
            await release.wait()
        await asyncio.sleep(0.002)
        return {"n": n}

    await cluster.add_agent("reports", {JOB: build}, max_concurrency=4, latency_ms=20_000)
    client = await cluster.client("batch")
    priorities = [(n * 7) % 10 for n in range(100)]
    handles = [await client.submit(JOB, {"n": n, "priority": p}, priority=p)
               for n, p in enumerate(priorities)]
    await wait_until(lambda: len(ran) == 4)
    await asyncio.sleep(0.3)  # past queue_wait (0.2 s): the 96 still wait, none is refused
    backlog = cluster.reach.metrics()["backlog"][JOB]
    assert backlog["waiting"] == 96 and backlog["oldest_s"] >= 0.3, backlog
    release.set()
    results = await asyncio.gather(*(h.result(timeout=20) for h in handles))
    assert [r["n"] for r in results] == list(range(100))
    waited = ran[4:]
    assert waited == sorted(waited, reverse=True), waited
    metrics = cluster.reach.metrics()
    assert metrics["capabilities"][JOB]["rejections"] == 0
    assert metrics["backlog"] == {}


async def test_a_submit_waits_for_a_restarting_agent_and_completes(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Issue 27, "no agent right now = failure": with the only agent of ``job.run``
    restarting, ``submit("job.run", timeout=30)`` failed at once with ``unavailable``, though
    the agent was back two seconds later (and the reason said "drained by an operator" of an
    agent that had closed itself). Now the submit waits for it, and a synchronous call still
    fails fast with the true reason."""
    cluster = await cluster_factory()

    async def run(n: int) -> dict[str, int]:
        return {"n": n}

    agent = await cluster.add_agent("jobs", {"job.run": run})
    client = await cluster.client("ops")
    await agent.close(drain=0.1)  # a rolling restart: it closes itself …
    await wait_until(lambda: cluster.reach.agents()[0]["draining"])
    with pytest.raises(Exception, match="stopped by itself") as refused:
        await client.call("job.run", {"n": 0}, timeout=5)
    assert getattr(refused.value, "code", None) == "unavailable"
    handle = await client.submit("job.run", {"n": 1}, timeout=30)
    await asyncio.sleep(0.3)
    assert (await cluster.reach.task(handle.task_id) or {}).get("state") == "queued"
    await cluster.add_agent("jobs", {"job.run": run})  # … and is back
    assert await handle.result(timeout=10) == {"n": 1}
    task = await cluster.reach.task(handle.task_id)
    assert task is not None
    assert [a["outcome"] for a in task["attempts"]] == ["ok"]


async def test_a_full_backlog_refuses_at_the_door_and_loses_nothing_accepted(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Admission moves to the door: past ``max_backlog`` waiting tasks of a capability a new
    submit is refused before it is accepted (``rejected``, with the backlog in its details);
    every task accepted before it completes once the agent catches up."""
    cluster = await cluster_factory(max_backlog=5)
    release = asyncio.Event()

    async def build(n: int) -> dict[str, int]:
        await release.wait()
        return {"n": n}

    await cluster.add_agent("reports", {JOB: build}, max_concurrency=2, latency_ms=20_000)
    client = await cluster.client("batch")
    accepted = [await client.submit(JOB, {"n": n}) for n in range(7)]  # 2 run, 5 wait
    await wait_until(lambda: cluster.reach.metrics()["backlog"].get(JOB, {}).get("waiting") == 5)
    with pytest.raises(Rejected, match="max_backlog 5") as refused:
        await client.submit(JOB, {"n": 99})
    assert refused.value.details["backlog"] == 5
    release.set()
    results = await asyncio.gather(*(h.result(timeout=10) for h in accepted))
    assert [r["n"] for r in results] == list(range(7))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_a_backlog_survives_a_kill_9_of_the_coordinator_in_order(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    """The backlog keeps its place across a restart: 30 submits to a 1-slot agent, the
    coordinator SIGKILLed while most of them wait, started again on the same SQLite file.
    Every task completes exactly once, and the ones that waited run in the order they were
    submitted (a resumed task keeps its place from its submit)."""
    port = free_port()
    db = tmp_path / "reach.db"
    url = f"ws://127.0.0.1:{port}"
    log = tmp_path / "runs.log"
    coordinator = start_coordinator(spawn, "coordinator-1", port, db)
    await coordinator.wait_for("coordinator listening on")
    agent = start_fault_agent(spawn, url, "worker", log, "--min-ms", 20, "--max-ms", 20,
                              "--max-concurrency", 1)
    await agent.wait_for("ready ")
    client = await Client.connect(url, caller="drill", reconnect_for=20)
    try:
        keys = [f"k{n:02d}" for n in range(30)]
        handles = [await client.submit("soak.read", {"n": n}, idempotency_key=key)
                   for n, key in enumerate(keys)]

        def started() -> list[str]:
            with contextlib.suppress(FileNotFoundError):
                return [line.split()[1] for line in log.read_text().splitlines()
                        if line.startswith("start ")]
            return []

        await wait_until(lambda: len(started()) >= 5, timeout=10)
        coordinator.kill9()
        before = started()
        restarted = start_coordinator(spawn, "coordinator-2", port, db)
        await restarted.wait_for("coordinator listening on")
        results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
        assert [r["n"] for r in results] == list(range(30))
        done = started()
        assert sorted(set(done)) == keys
        # Each key ran once, except the one the kill may have cut short (resent to the same
        # process, whose key cache answers: it never starts twice either).
        assert len(done) == len(set(done)), done
        assert done[len(before):] == sorted(done[len(before):]), (before, done)

        def states() -> dict[str, int]:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                return dict(conn.execute(
                    "SELECT state, count(*) FROM reach_tasks GROUP BY state"))

        # (the last rows are written just behind the answers)
        await wait_until(lambda: states() == {"succeeded": 30}, timeout=5)
    finally:
        await client.close()
