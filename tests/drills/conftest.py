"""Shared plumbing for the failure drills: millisecond settings, run counters, liveness
watches, a loopback relay that can hold traffic, and real subprocesses (agents, coordinator).

Every drill reproduces one incident from the field notes (FIELD.md), scaled from seconds to
milliseconds; each test's docstring names it. Nothing leaves loopback, and every process or
socket a drill opens is closed in its fixture's teardown, pass or fail.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from relay import Relay
from subprocs import Proc, agent_view

from reach import Reach
from reach.core.backoff import Backoff
from reach.testing import Cluster

REPO = Path(__file__).resolve().parents[2]
PROCS = REPO / "tests" / "procs"
TERMINAL = ("succeeded", "failed", "dead")

# Heartbeats every 50 ms, retries 10 ms → 100 ms: the field's seconds, scaled to milliseconds.
FAST: dict[str, Any] = {"heartbeat_interval": 0.05, "ack_timeout": 0.5,
                        "backoff": Backoff(base=0.01, cap=0.1), "recovery_grace": 0.5}


# ---------------------------------------------------------------- in-process clusters


@pytest_asyncio.fixture
async def cluster_factory() -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    """``await cluster_factory(**options)``: a coordinator with ``FAST`` settings overridden
    by ``options``; every cluster is closed at teardown."""
    made: list[Cluster] = []

    async def make(**options: Any) -> Cluster:
        cluster = await Cluster.start(**{**FAST, **options})
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            await cluster.close()


class Runs:
    """Handler runs per idempotency key, counted where the work happens (the agent side)."""

    def __init__(self) -> None:
        self.started: collections.Counter[str] = collections.Counter()
        self.finished: collections.Counter[str] = collections.Counter()
        self.by_agent: collections.Counter[str] = collections.Counter()

    def start(self, key: str, agent: str = "") -> None:
        self.started[key] += 1
        self.by_agent[agent] += 1

    def twice(self) -> dict[str, int]:
        return {k: c for k, c in self.started.items() if c > 1}


class StateWatch:
    """Samples one agent's view every few ms and keeps every change of (state, agent_id,
    breaker) it saw, so a drill can assert the whole path, not just where it ended."""

    def __init__(self, reach: Reach, name: str, every: float = 0.003) -> None:
        self.reach, self.name, self.every = reach, name, every
        self.seen: list[tuple[float, str, str, str]] = []  # (monotonic, state, id, breaker)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def sample(self) -> None:
        view = agent_view(self.reach, self.name)
        if view is None:
            return
        entry = (view["state"], view["agent_id"], view["breaker"])
        if not self.seen or self.seen[-1][1:] != entry:
            self.seen.append((time.monotonic(), *entry))

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every)

    @property
    def states(self) -> list[str]:
        """Liveness states in the order seen, consecutive repeats folded."""
        out: list[str] = []
        for _, state, _, _ in self.seen:
            if not out or out[-1] != state:
                out.append(state)
        return out

    @property
    def breakers(self) -> list[str]:
        out: list[str] = []
        for _, _, _, breaker in self.seen:
            if not out or out[-1] != breaker:
                out.append(breaker)
        return out

    @property
    def ids(self) -> set[str]:
        return {agent_id for _, _, agent_id, _ in self.seen}

    def current(self) -> str | None:
        self.sample()
        return self.seen[-1][1] if self.seen else None

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


# ---------------------------------------------------------------- a network that can blip


class Blip(Relay):
    """A loopback TCP relay in front of the coordinator. ``hold()`` stops moving bytes both
    ways while the sockets stay open (a network blip: nothing arrives, nothing is closed);
    ``release()`` lets what queued up flow again, in order."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


# ---------------------------------------------------------------- real processes


def start_fault_agent(spawn: Callable[..., Proc], url: str, name: str, log: Path,
                      *options: Any, incarnation: int = 1) -> Proc:
    """An agent process serving ``soak.read`` (idempotent) and ``soak.write`` (not).
    A restart under the same agent name passes a new ``incarnation`` (its own output file)."""
    return spawn(f"{name}.{incarnation}", PROCS / "fault_agent.py", url, name, "--log", log,
                 *options)


def log_lines(log: Path, kind: str) -> list[list[str]]:
    """Lines ``KIND KEY TASK ATTEMPT PID`` of a fault agent's log, as split fields."""
    if not log.exists():
        return []
    return [parts for line in log.read_text().splitlines()
            if (parts := line.split()) and parts[0] == kind]
