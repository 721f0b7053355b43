"""Drill: the coordinator process is SIGKILLed in the middle of result chains and started again
on its SQLite file: every chain resumes where it was and ends, and no step runs twice."""

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
from conftest import PROCS
from subprocs import Proc, free_port, start_coordinator

from reach import Client
from reach.testing import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
STEPS = ["chain.fetch", "chain.sum", "chain.report"]


def runs(log: Path) -> list[list[str]]:
    """The agents' executions: ``KEY TASK_ID CAPABILITY PID`` each."""
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


async def test_a_coordinator_killed_mid_chain_resumes_every_chain_and_runs_no_step_twice(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    """Sixteen three-step chains across two agent processes (the analyst runs steps 1 and 2,
    the writer step 3), each head with its own key. The coordinator is killed with SIGKILL
    once some chains are past their head and others not yet, and started again on the same
    file and port. Every chain ends with its last step's result (the path of steps it took),
    each step key ran once at an agent, and the store holds each chain's three tasks once."""
    port, db, log = free_port(), tmp_path / "reach.db", tmp_path / "runs.log"
    url = f"ws://127.0.0.1:{port}"
    coordinator = start_coordinator(spawn, "coordinator-1", port, db)
    await coordinator.wait_for("coordinator listening on")
    agents = [spawn("analyst", PROCS / "chain_agent.py", url, "analyst", "chain.fetch",
                    "chain.sum", "--log", log),
              spawn("writer", PROCS / "chain_agent.py", url, "writer", "chain.report",
                    "--log", log)]
    for agent in agents:
        await agent.wait_for("ready ")
    client = await Client.connect(url, caller="drill", reconnect_for=20)
    try:
        keys = [f"c{i:02d}" for i in range(16)]
        handles = [await client.submit(STEPS[0], {"n": 0, "path": []}, idempotency_key=key,
                                       then=STEPS[1:]) for key in keys]
        at_kill: dict[str, int] = {}

        async def chaos() -> None:
            # Some chains past their head, not all of them ended.
            await wait_until(lambda: len(runs(log)) >= 20, timeout=15, interval=0.002)
            coordinator.kill9()
            at_kill["runs"] = len(runs(log))
            restarted = start_coordinator(spawn, "coordinator-2", port, db)
            await restarted.wait_for("coordinator listening on")

        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(chaos())
            results = [tg.create_task(h.result(timeout=30)) for h in handles]
        elapsed = time.monotonic() - started
        for task in results:
            assert task.result() == {"n": 3, "path": STEPS}

        executed = collections.Counter(key for key, _task, _cap, _pid in runs(log))
        print(f"\nchain SIGKILL: {len(keys)} chains of 3 in {elapsed:.2f}s, "
              f"{at_kill['runs']} of {3 * len(keys)} steps run at the kill, "
              f"{sum(executed.values())} runs")
        assert 0 < at_kill["runs"] < 3 * len(keys), "the kill hit no chain mid-way"
        assert executed == collections.Counter(
            f"{key}{suffix}" for key in keys for suffix in ("", "#2", "#3")), \
            {k: c for k, c in executed.items() if c > 1}

        def stored() -> tuple[collections.Counter[str], collections.Counter[str]]:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                return (collections.Counter(k.removeprefix("drill/") for (k,) in conn.execute(
                            "SELECT idempotency_key FROM reach_tasks")),
                        collections.Counter(s for (s,) in conn.execute(
                            "SELECT state FROM reach_tasks")))
        # (a task's last change is written behind its answer, within update_delay)
        await wait_until(lambda: stored()[1] == {"succeeded": 3 * len(keys)}, timeout=5,
                         interval=0.01)
        assert stored()[0] == collections.Counter(executed), "a step was stored twice"
        head = await client.status(handles[0].task_id)
        second = await client.status(head["chain"]["next"])
        third = await client.status(second["chain"]["next"])
        assert {v["trace_id"] for v in (head, second, third)} == {handles[0].trace_id}
        assert third["result"] == {"n": 3, "path": STEPS}
    finally:
        await client.close()
