"""Drill: the coordinator process is SIGKILLed under load and started again on its store."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TERMINAL, log_lines, start_fault_agent
from subprocs import Proc, free_port, start_coordinator

from reach import Client, ReachError
from reach.testing import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


async def test_coordinator_sigkill_loses_nothing_acknowledged_and_runs_no_key_twice(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    """Field: "The coordinator leaked memory and died: everyone lost everyone for an hour."
    Lesson: state on disk, a restart restores it, agents keep serving. Here the coordinator is a
    process on a SQLite file, killed with SIGKILL while 24 calls are in flight (half idempotent
    reads, half non-idempotent writes) and started again on the same file and port. Callers and
    agents reconnect by themselves. Every acknowledged task reaches a terminal state and
    succeeds; no idempotency key starts twice at any agent (interrupted tasks go back to the
    agent that holds the key, whose cache answers); each key is one stored task."""
    port = free_port()
    db = tmp_path / "reach.db"
    url = f"ws://127.0.0.1:{port}"
    log = tmp_path / "runs.log"
    coordinator = start_coordinator(spawn, "coordinator-1", port, db)
    await coordinator.wait_for("coordinator listening on")
    agents = [start_fault_agent(spawn, url, f"worker-{j}", log, "--min-ms", 5, "--max-ms", 20)
              for j in range(2)]
    for agent in agents:
        await agent.wait_for("ready ")
    client = await Client.connect(url, caller="drill", reconnect_for=20)
    try:
        total, width = 300, 24
        acked: dict[str, str] = {}      # key → task id, once durably accepted
        outcomes: dict[str, str] = {}   # key → "ok" | error code
        resubmits: collections.Counter[str] = collections.Counter()
        todo = collections.deque(range(total))
        at_kill: dict[str, int] = {}

        async def worker() -> None:
            while todo:
                n = todo.popleft()
                key = f"k{n:03d}"
                capability = "soak.read" if n % 2 else "soak.write"
                deadline = time.monotonic() + 15
                handle = None
                while handle is None:
                    try:
                        handle = await client.submit(capability, {"n": n}, idempotency_key=key)
                    except ReachError as exc:
                        # Not acknowledged: the caller's part is to retry with the same key.
                        if exc.code not in ("unavailable", "no_route") or \
                                time.monotonic() > deadline:
                            raise
                        resubmits[exc.code] += 1
                        await asyncio.sleep(0.05)
                assert acked.setdefault(key, handle.task_id) == handle.task_id
                try:
                    assert (await handle.result(timeout=15))["n"] == n
                    outcomes[key] = "ok"
                except ReachError as exc:
                    outcomes[key] = exc.code

        async def chaos() -> None:
            await wait_until(lambda: len(outcomes) >= 100, timeout=15, interval=0.002)
            coordinator.kill9()
            at_kill["unfinished"] = len(acked) - len(outcomes)
            restarted = start_coordinator(spawn, "coordinator-2", port, db)
            await restarted.wait_for("coordinator listening on")

        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(chaos())
            for _ in range(width):
                tg.create_task(worker())
        elapsed = time.monotonic() - started

        assert sorted(acked) == [f"k{n:03d}" for n in range(total)]
        states: dict[str, str] = {}
        resumed: set[str] = set()
        for key, task_id in acked.items():
            view = await client.status(task_id)
            assert view["state"] in TERMINAL, view
            states[key] = view["state"]
            if any(h["note"] == "resumed" for h in view["history"]):
                resumed.add(key)
        started_runs = collections.Counter(parts[1] for parts in log_lines(log, "start"))
        twice = {k: c for k, c in started_runs.items() if c > 1}
        with contextlib.closing(sqlite3.connect(db)) as conn:
            # (stored scoped to their caller: "drill/k001")
            rows = collections.Counter(k.removeprefix("drill/") for (k,) in conn.execute(
                "SELECT idempotency_key FROM reach_tasks"))
        print(f"\ncoordinator SIGKILL: {total} tasks in {elapsed:.2f}s, "
              f"{at_kill['unfinished']} acknowledged and unfinished at the kill, "
              f"{len(resumed)} resumed, states {dict(collections.Counter(states.values()))}, "
              f"submit retries {dict(resubmits)}, runs {sum(started_runs.values())} of "
              f"{len(started_runs)} keys, twice {len(twice)}")
        assert not twice, f"keys started more than once: {sorted(twice)[:10]}"
        assert {k for k, c in rows.items() if c > 1} == set(), "a key was stored twice"
        assert set(rows) == set(acked)
        assert at_kill["unfinished"] > 0 and resumed, "the kill hit nothing in flight"
        assert set(states.values()) == {"succeeded"}, collections.Counter(states.values())
        assert set(outcomes.values()) == {"ok"}
    finally:
        await client.close()
