"""Chaos with real processes: a frozen agent, a killed agent, a killed coordinator.

Every agent or coordinator that is meant to fail runs in its own OS process and is hit with a real
signal (SIGSTOP/SIGCONT, SIGKILL); nothing is simulated. Helpers live in ``tests/procs/``.
Every subprocess is killed and reaped in the ``spawn`` fixture's teardown, pass or fail.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from subprocs import Proc, agent_view, free_port, start_coordinator

from reach import Agent, Client, Context, Reach, ReachError

REPO = Path(__file__).resolve().parents[1]
AGENT_SCRIPT = Path(__file__).resolve().parent / "procs" / "agent.py"
CAP = "chaos.work"
TERMINAL = ("succeeded", "failed", "dead")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


# ---------------------------------------------------------------- process plumbing


def start_agent(spawn: Callable[..., Proc], url: str, name: str, log: Path, *,
                min_ms: float = 5, max_ms: float = 20, max_concurrency: int = 20) -> Proc:
    return spawn(name, AGENT_SCRIPT, url, name, "--log", log, "--min-ms", min_ms,
                 "--max-ms", max_ms, "--max-concurrency", max_concurrency)


def executions(log: Path) -> list[str]:
    """Idempotency keys in the order an agent process started running them."""
    if not log.exists():
        return []
    return [line.split()[0] for line in log.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------- in-process helpers


async def until(pred: Callable[[], Any], timeout: float, what: str,
                interval: float = 0.005) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


class StateWatch:
    """Samples one agent's liveness every few ms and keeps the transitions it saw."""

    def __init__(self, reach: Reach, name: str, every: float = 0.004) -> None:
        self.reach, self.name, self.every = reach, name, every
        self.seen: list[tuple[float, str, str]] = []  # (monotonic time, state, agent_id)
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def states(self) -> list[str]:
        return [s for _, s, _ in self.seen]

    @property
    def current(self) -> str | None:
        return self.seen[-1][1] if self.seen else None

    def first(self, state: str, after: float = 0.0) -> float | None:
        return next((t for t, s, _ in self.seen if s == state and t >= after), None)

    async def _run(self) -> None:
        while True:
            view = agent_view(self.reach, self.name)
            if view is not None and (not self.seen or self.seen[-1][1] != view["state"]
                                     or self.seen[-1][2] != view["agent_id"]):
                self.seen.append((time.monotonic(), view["state"], view["agent_id"]))
            await asyncio.sleep(self.every)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def in_process_agent(name: str, ran: list[str]) -> Agent:
    agent = Agent(name, max_concurrency=20, reconnect_base=0.05)

    @agent.capability(CAP, params={"type": "object"}, idempotent=True, latency_ms=100)
    async def work(n: int, ctx: Context) -> dict:
        ran.append(ctx.idempotency_key)
        await asyncio.sleep(random.uniform(0.005, 0.020))  # like tests/procs/agent.py
        return {"agent": name, "n": n, "pid": os.getpid()}

    return agent


# ---------------------------------------------------------------- 1. SIGSTOP


async def test_sigstopped_agent_is_suspected_then_offline_then_back_online(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    # offline_after=4 (not 3) only widens the 'suspected' window to 200 ms so the routing
    # check below runs while the frozen agent is suspected, not already offline.
    reach = await Reach.start(port=0, heartbeat_interval=0.1, suspect_after=2,
                              offline_after=4, ack_timeout=1.0)
    healthy_ran: list[str] = []
    healthy = in_process_agent("healthy", healthy_ran)
    client = None
    watch = None
    frozen = None
    try:
        frozen_log = tmp_path / "frozen.log"
        frozen = start_agent(spawn, reach.url, "frozen", frozen_log)
        ready = await frozen.wait_for("ready ")
        frozen_id = ready.split()[1]
        await healthy.connect(reach.url)
        client = await Client.connect(reach.url, caller="chaos")
        await until(lambda: all(agent_view(reach, n) and agent_view(reach, n)["state"] ==
                                "online" for n in ("frozen", "healthy")), 5, "both online")
        assert agent_view(reach, "frozen")["agent_id"] == frozen_id
        watch = StateWatch(reach, "frozen")
        await until(lambda: watch.current == "online", 1, "watch started")

        # Freeze it. The socket stays open: only missing heartbeats can tell.
        stopped_at = time.monotonic()
        frozen.send(signal.SIGSTOP)
        await until(lambda: watch.current == "suspected", 3, "frozen agent suspected")
        assert agent_view(reach, "frozen")["connected"] is True

        # While it is suspected, no new work goes to it: the healthy agent serves everything.
        state_at_submit = watch.current
        handles = [await client.submit(CAP, {"n": i}, idempotency_key=f"suspect-{i}")
                   for i in range(10)]
        results = await asyncio.gather(*(h.result(timeout=5) for h in handles))
        assert [r["agent"] for r in results] == ["healthy"] * 10
        for h in handles:
            status = await client.status(h.task_id)
            assert status["state"] == "succeeded"
            assert {a["agent_id"] for a in status["attempts"]} == \
                {agent_view(reach, "healthy")["agent_id"]}, status["attempts"]

        await until(lambda: watch.current == "offline", 3, "frozen agent offline")
        t_suspected = watch.first("suspected", stopped_at)
        t_offline = watch.first("offline", stopped_at)
        assert t_suspected is not None and t_offline is not None
        assert t_suspected < t_offline, watch.seen
        after_stop = [s for t, s, _ in watch.seen if t >= stopped_at]
        assert after_stop == ["suspected", "offline"], watch.seen
        assert watch.states[0] == "online", watch.seen

        # Thaw it: the next beat brings the same identity back online, no re-registration.
        continued_at = time.monotonic()
        frozen.send(signal.SIGCONT)
        await until(lambda: watch.current == "online", 3, "frozen agent back online")
        view = agent_view(reach, "frozen")
        assert view["agent_id"] == frozen_id
        assert {aid for _, _, aid in watch.seen} == {frozen_id}
        # Nothing submitted while it was frozen ever reached it (it would have run it on SIGCONT).
        await asyncio.sleep(0.2)
        assert not [k for k in executions(frozen_log) if k.startswith("suspect-")]

        # It serves again: with the healthy agent gone, every call must land on it.
        await healthy.close()
        await until(lambda: agent_view(reach, "healthy")["state"] != "online", 3,
                    "healthy agent not online after close")
        again = await asyncio.gather(*(client.call(CAP, {"n": i}, idempotency_key=f"back-{i}",
                                                   timeout=5) for i in range(5)))
        assert [r["agent"] for r in again] == ["frozen"] * 5
        assert sorted(k for k in executions(frozen_log) if k.startswith("back-")) == \
            [f"back-{i}" for i in range(5)]
        print(f"\nSIGSTOP: suspected after {(t_suspected - stopped_at) * 1000:.0f} ms, "
              f"offline after {(t_offline - stopped_at) * 1000:.0f} ms, state at submit "
              f"{state_at_submit!r}, online again "
              f"{(watch.first('online', continued_at) - continued_at) * 1000:.0f} ms after "
              f"SIGCONT")
    finally:
        if watch is not None:
            await watch.stop()
        if frozen is not None:
            frozen.reap()  # a still-frozen peer would hold reach.stop() in its close handshake
        if client is not None:
            await client.close()
        await healthy.close(drain=1.0)
        await reach.stop()


# ---------------------------------------------------------------- 2. SIGKILL an agent


async def test_sigkilled_agent_under_load_fails_over_and_loses_nothing(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    reach = await Reach.start(port=0, heartbeat_interval=0.05, suspect_after=2,
                              offline_after=3, ack_timeout=1.0)
    survivor_ran: list[str] = []
    survivor = in_process_agent("survivor", survivor_ran)
    client = None
    watch = None
    try:
        victim_log = tmp_path / "victim.log"
        victim = start_agent(spawn, reach.url, "victim", victim_log, min_ms=5, max_ms=20)
        victim_id = (await victim.wait_for("ready ")).split()[1]
        await survivor.connect(reach.url)
        client = await Client.connect(reach.url, caller="chaos")
        await until(lambda: all(agent_view(reach, n) and agent_view(reach, n)["state"] ==
                                "online" for n in ("victim", "survivor")), 5, "both online")
        watch = StateWatch(reach, "victim")

        total, width = 200, 16
        results: dict[int, Any] = {}
        errors: dict[int, BaseException] = {}
        task_ids: dict[int, str] = {}
        todo = collections.deque(range(total))
        killed_at: list[float] = []
        done_at_kill: list[int] = []

        async def worker() -> None:
            while todo:
                i = todo.popleft()
                try:
                    h = await client.submit(CAP, {"n": i}, idempotency_key=f"load-{i}")
                    task_ids[i] = h.task_id
                    results[i] = await h.result(timeout=15)
                except ReachError as exc:
                    errors[i] = exc

        async def killer() -> None:
            # Mid-load: a third of the calls done, and the victim has been taking its share.
            await until(lambda: len(results) >= total // 3 and len(executions(victim_log)) >= 5,
                        10, "load under way", 0.002)
            victim.kill9()
            killed_at.append(time.monotonic())
            done_at_kill.append(len(results))

        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:  # a failure cancels the rest
            tg.create_task(killer())
            for _ in range(width):
                tg.create_task(worker())
        elapsed = time.monotonic() - started

        assert killed_at, "the victim was never killed"
        assert not errors, {i: repr(e) for i, e in list(errors.items())[:5]}
        assert sorted(results) == list(range(total))
        assert all(results[i]["n"] == i for i in range(total))
        by_agent = collections.Counter(r["agent"] for r in results.values())
        assert by_agent["victim"] > 0 and by_agent["survivor"] > 0, by_agent
        # Work after the kill went to the survivor; the victim's lost calls were failed over.
        failed_over = 0
        for i, tid in task_ids.items():
            status = await client.status(tid)
            assert status["state"] == "succeeded", status
            outcomes = [(a["agent_id"], a["outcome"]) for a in status["attempts"]]
            if any(aid == victim_id and o != "ok" for aid, o in outcomes):
                failed_over += 1
                assert outcomes[-1][1] == "ok" and outcomes[-1][0] != victim_id, outcomes

        await until(lambda: watch.current == "offline", 3, "victim offline")
        after_kill = [s for t, s, _ in watch.seen if t >= killed_at[0]]
        assert after_kill[-1] == "offline", watch.seen
        assert "suspected" in after_kill and \
            after_kill.index("suspected") < after_kill.index("offline"), watch.seen
        assert set(watch.states) <= {"online", "suspected", "offline"}
        print(f"\nSIGKILL agent: {total} calls in {elapsed:.2f}s, killed after "
              f"{done_at_kill[0]} done, served by {dict(by_agent)}, "
              f"{failed_over} failed over from the killed agent, "
              f"{len(executions(victim_log))} runs started at the victim, "
              f"states after kill {after_kill}")
    finally:
        if watch is not None:
            await watch.stop()
        if client is not None:
            await client.close()
        await survivor.close(drain=1.0)
        await reach.stop()


# ---------------------------------------------------------------- 3. SIGKILL the coordinator


# With two agents, a task interrupted by the crash must go back to the agent that was running
# it: only that agent's cache knows the key (another agent would run it a second time).
@pytest.mark.parametrize("n_agents", [1, 2])
async def test_sigkilled_coordinator_resumes_every_acknowledged_task_once(
        spawn: Callable[..., Proc], tmp_path: Path, n_agents: int) -> None:
    port = free_port()
    db = tmp_path / "reach.db"
    url = f"ws://127.0.0.1:{port}"
    agent_log = tmp_path / "agent.log"

    coord = start_coordinator(spawn, "coordinator-1", port, db)
    await coord.wait_for("coordinator listening on")
    # Every agent process appends to the same log (one O_APPEND write per line).
    workers = [start_agent(spawn, url, f"worker-{j}", agent_log, min_ms=5, max_ms=20)
               for j in range(n_agents)]
    for worker_proc in workers:
        await worker_proc.wait_for("ready ")
    client = await Client.connect(url, caller="chaos", reconnect_for=20)
    try:
        total, width = 300, 24
        acked: dict[str, str] = {}           # key → task id, once durably accepted
        outcomes: dict[str, str] = {}        # key → "ok" | error code, from handle.result
        submit_errors: collections.Counter[str] = collections.Counter()
        todo = collections.deque(f"k{i:03d}" for i in range(total))
        phase = {"killed": False}
        in_flight_at_kill: list[int] = []
        ran_before_kill: set[str] = set()

        async def worker() -> None:
            while todo:
                key = todo.popleft()
                n = int(key[1:])
                deadline = time.monotonic() + 12
                handle = None
                while handle is None:
                    try:
                        handle = await client.submit(CAP, {"n": n}, idempotency_key=key)
                    except ReachError as exc:
                        # Not acknowledged (connection lost, or no agent back yet after the
                        # restart): the caller's job is to retry with the same key. 'no_route'
                        # is what a restarted coordinator says before its agents re-register.
                        if exc.code not in ("unavailable", "no_route") or \
                                time.monotonic() > deadline:
                            raise
                        submit_errors[exc.code] += 1
                        await asyncio.sleep(0.05)
                assert acked.setdefault(key, handle.task_id) == handle.task_id
                try:
                    value = await handle.result(timeout=12)
                    assert value["n"] == n
                    outcomes[key] = "ok"
                except ReachError as exc:
                    outcomes[key] = exc.code

        async def chaos() -> None:
            await until(lambda: len(outcomes) >= 100, 10, "100 outcomes", 0.002)
            coord.kill9()
            phase["killed"] = True
            in_flight_at_kill.append(len(acked) - len(outcomes))
            ran_before_kill.update(executions(agent_log))
            restarted = start_coordinator(spawn, "coordinator-2", port, db)
            await restarted.wait_for("coordinator listening on")

        started = time.monotonic()
        async with asyncio.TaskGroup() as tg:  # a failure cancels the rest
            tg.create_task(chaos())
            for _ in range(width):
                tg.create_task(worker())
        load_s = time.monotonic() - started
        assert phase["killed"]

        # Every acknowledged task reaches a terminal state on the restarted coordinator.
        assert sorted(acked) == [f"k{i:03d}" for i in range(total)]
        states: dict[str, str] = {}
        resumed: set[str] = set()
        deadline = time.monotonic() + 10
        while len(states) < len(acked):
            for key, tid in acked.items():
                if key not in states:
                    status = await client.status(tid)
                    if status["state"] in TERMINAL:
                        states[key] = status["state"]
                        if any(h["note"] == "resumed" for h in status["history"]):
                            resumed.add(key)
            if len(states) < len(acked):
                assert time.monotonic() < deadline, \
                    f"{len(acked) - len(states)} acknowledged task(s) never ended"
                await asyncio.sleep(0.05)
        counts = collections.Counter(states.values())

        # No idempotency key ran twice at the agent, and each one is a single stored task.
        ran = collections.Counter(executions(agent_log))
        twice = {k: c for k, c in ran.items() if c > 1}
        with contextlib.closing(sqlite3.connect(db)) as conn:
            # (stored scoped to their caller: "chaos/k001")
            rows = collections.Counter(k.removeprefix("chaos/") for (k,) in conn.execute(
                "SELECT idempotency_key FROM reach_tasks"))
        print(f"\nSIGKILL coordinator ({n_agents} agent(s)): {total} tasks in {load_s:.2f}s, "
              f"{in_flight_at_kill[0]} acknowledged and unfinished at the kill, "
              f"{len(resumed)} resumed after the restart ({len(resumed & ran_before_kill)} of "
              f"them had already started at the agent before the kill), "
              f"terminal states {dict(counts)}, handle outcomes "
              f"{dict(collections.Counter(outcomes.values()))}, submit retries "
              f"{dict(submit_errors)}, executions {sum(ran.values())} of {len(ran)} keys, "
              f"ran twice {len(twice)}")
        assert not twice, f"idempotency keys executed more than once: {sorted(twice)[:10]}"
        assert {k for k, c in rows.items() if c > 1} == set(), "a key was accepted twice"
        assert set(rows) == set(acked)
        assert in_flight_at_kill[0] > 0
        assert resumed, "the kill hit no stored unfinished task: the test proved nothing"
        assert counts["succeeded"] >= 0.9 * total, counts
        for key, st in states.items():
            if st == "succeeded":
                assert ran[key] == 1, key
                assert outcomes[key] == "ok", (key, outcomes[key])
    finally:
        await client.close()
