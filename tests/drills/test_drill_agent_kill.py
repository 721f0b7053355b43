"""Drill: an agent process is SIGKILLed under load, then restarted."""

from __future__ import annotations

import asyncio
import collections
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST, StateWatch, log_lines, start_fault_agent
from subprocs import Proc, agent_view

from reach import Client, Reach, ReachError
from reach.testing import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
CAP = "soak.read"


async def test_agent_sigkill_under_load_loses_no_call(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    """Field: "7–8 agents, addresses hard-coded in config files; [...] removing one means
    hunting who still calls the dead address" — here an agent disappears without notice (a
    SIGKILL: the OOM killer, a node lost) in the middle of load. Two agent processes share a
    stream of idempotent calls (16 in flight); one is SIGKILLed mid-load and started again
    under the same name. No call is lost or answered with an error: the killed agent's
    in-flight work fails over to the survivor, nothing more is sent to the dead one, and the
    restarted process keeps its agent_id and takes work again."""
    reach = await Reach.start(**{**FAST, "ack_timeout": 1.0, "max_retries": 3,
                                 "breaker_open_for": 0.3})
    client = None
    watch = None
    try:
        log = tmp_path / "runs.log"
        victim = start_fault_agent(spawn, reach.url, "victim", log, "--min-ms", 5,
                                   "--max-ms", 20)
        survivor = start_fault_agent(spawn, reach.url, "survivor", log, "--min-ms", 5,
                                     "--max-ms", 20)
        victim_id = (await victim.wait_for("ready ")).split()[1]
        await survivor.wait_for("ready ")
        client = await Client.connect(reach.url, caller="drill")
        watch = StateWatch(reach, "victim")

        least, width = 400, 16
        results: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        task_ids: dict[int, str] = {}
        numbers = itertools.count()
        events: dict[str, int] = {}
        walls: dict[str, float] = {}  # wall-clock times, comparable with attempt times
        deadline = time.monotonic() + 20

        def enough() -> bool:
            # At least `least` calls, and the restarted process has answered some of them.
            if len(task_ids) < least or "back_after" not in events:
                return False
            return sum(1 for r in results.values() if r["pid"] == victim.popen.pid) >= 5

        def victim_runs() -> int:
            return sum(1 for parts in log_lines(log, "done") if parts[4] == str(victim.popen.pid))

        async def worker() -> None:
            while not enough():
                assert time.monotonic() < deadline, "the drill ran out of time"
                i = next(numbers)
                try:
                    handle = await client.submit(CAP, {"n": i}, idempotency_key=f"k{i}")
                    task_ids[i] = handle.task_id
                    results[i] = await handle.result(timeout=15)
                except ReachError as exc:
                    errors[i] = exc

        async def chaos() -> None:
            nonlocal victim
            await wait_until(lambda: len(results) >= least // 4 and victim_runs() >= 5,
                             timeout=15, interval=0.002)
            victim.kill9()
            events["killed_after"] = len(results)
            walls["killed"] = time.time()
            await wait_until(lambda: agent_view(reach, "victim")["state"] != "online",
                             timeout=5)
            walls["restarting"] = time.time()
            victim = start_fault_agent(spawn, reach.url, "victim", log, "--min-ms", 5,
                                       "--max-ms", 20, incarnation=2)
            assert (await victim.wait_for("ready ")).split()[1] == victim_id
            events["back_after"] = len(results)

        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(chaos())
            for _ in range(width):
                tg.create_task(worker())
        elapsed = time.monotonic() - started

        assert not errors, {i: repr(e) for i, e in list(errors.items())[:5]}
        total = len(task_ids)
        assert sorted(results) == list(range(total))
        assert all(results[i]["n"] == i for i in range(total))
        failed_over = 0
        for i, task_id in task_ids.items():
            view = await client.status(task_id)
            assert view["state"] == "succeeded", view
            outcomes = [(a["agent"], a["outcome"]) for a in view["attempts"]]
            # Once the coordinator saw the socket close (allow 100 ms), nothing was sent to
            # the dead process until a new one was started.
            assert not [a for a in view["attempts"] if a["agent"] == "victim"
                        and walls["killed"] + 0.1 < a["started_at"] < walls["restarting"]], view
            if any(o != "ok" for _, o in outcomes):
                failed_over += 1
                assert outcomes[-1][1] == "ok", outcomes
        by_pid = collections.Counter(r["pid"] for r in results.values())
        assert by_pid[victim.popen.pid] >= 5, by_pid  # the restarted process serves
        assert watch.ids == {victim_id}
        assert "suspected" in watch.states or "offline" in watch.states, watch.seen
        print(f"\nagent SIGKILL: {total} calls in {elapsed:.2f}s, killed after "
              f"{events['killed_after']}, back after {events['back_after']}, "
              f"{failed_over} failed over, answered by pid {dict(by_pid)}, "
              f"victim states {watch.states}, breaker {watch.breakers}")
    finally:
        if watch is not None:
            await watch.stop()
        if client is not None:
            await client.close()
        await reach.stop()
