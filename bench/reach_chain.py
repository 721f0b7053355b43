"""Reach in the benchmark: caller (``Client``) ──ws──▶ Reach coordinator ──ws──▶ Agent SDK echo.

The base rows keep their names (``reach-sqlite-file``: the durable SQLite-file store, every task
committed before it is delivered; ``reach-memory``: the in-memory store), one agent, and an
``echo.run`` capability that declares no params schema (``{}``). The *matrix* varies one thing
at a time from the durable row — 8 or 32 agents, the in-memory store at 32 agents, a real params
schema (validated by the coordinator on every call) at 1 and at 32 agents:

    reach-file-8ag  reach-file-32ag  reach-memory-32ag  reach-file-schema  reach-file-32ag-schema

Several agents are several ``Agent`` objects in one agent process, each with its own websocket,
name and registration: the coordinator sees N agents and routes among them, while the agent
side costs one process as in the 1-agent rows (the machine has 2 cores; 32 agent processes
would measure the scheduler). The capability declares ``latency_ms`` (``--latency-ms``, default
50): Reach derives its completion timeout from it, so a pause anywhere shows up as errors.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from harness import PAYLOAD, Chain, Launcher, percentile, role, say, serve_caller, serve_commands

# The "schema" rows: what a careful team declares for {"data": "..."}; the others declare {}.
SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"data": {"type": "string", "maxLength": 4096}},
    "required": ["data"], "additionalProperties": False}
assert not set(PAYLOAD) - set(SCHEMA["properties"])


class GcWatch:
    """Counts the garbage collector's pauses per generation (a coordinator-side hot spot)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.worst = [0.0, 0.0, 0.0]
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = info.get("generation", 0)
        took = time.perf_counter() - self._t0
        self.count[gen] += 1
        self.total[gen] += took
        self.worst[gen] = max(self.worst[gen], took)

    def view(self) -> dict[str, Any]:
        return {"gc_count": self.count, "gc_total_ms": [round(t * 1000, 1) for t in self.total],
                "gc_worst_ms": [round(t * 1000, 2) for t in self.worst]}


# -------------------------------------------------------------------- roles


async def role_reach(args: argparse.Namespace) -> None:
    """The coordinator, tuned as ``reach serve`` tunes it; ``stats`` reports its insides."""
    from reach import Reach
    from reach.cli import tune_gc

    gc_watch = GcWatch()
    reach = await Reach.start(store=args.store, port=args.port, heartbeat_interval=10.0)
    tune_gc()
    # Time each group commit (instrumentation only; the store's behaviour is unchanged).
    commit_times: list[float] = []
    commit = reach.store._commit

    def timed_commit(*a: Any) -> None:
        t0 = time.perf_counter()
        try:
            commit(*a)
        finally:
            commit_times.append(time.perf_counter() - t0)
            if len(commit_times) > 200_000:
                del commit_times[:100_000]

    reach.store._commit = timed_commit  # type: ignore[method-assign]

    async def handle(words: list[str]) -> None:
        if words[0] != "stats":
            say("ERR", "unknown-command", words[0])
            return
        gw, store = reach.gateway, reach.store
        outcomes: dict[str, int] = {}
        for task in list(gw.recent.values()):
            for attempt in task.attempts:
                outcomes[attempt.outcome] = outcomes.get(attempt.outcome, 0) + 1
        agents = [{k: a.get(k) for k in ("name", "state", "breaker", "calls", "faults")}
                  for a in reach.agents()]
        times = sorted(commit_times)
        say("STATS", json.dumps({
            "attempt_outcomes": outcomes, "agents": agents[:4], "agent_count": len(agents),
            "commits": store.commits, "rows_written": store.rows_written,
            "live": len(gw.live), "recent": len(gw.recent), "traces": len(gw.traces),
            "keys": len(gw.keys), "outcomes": len(gw.book._outcomes),
            "commits_pending": len(gw.book.commits), "drivers": len(gw._drivers),
            "cpu_s": round(time.process_time(), 3), **gc_watch.view(),
            "commit_ms_total": round(sum(times) * 1000, 1),
            "commit_ms_p50": round(percentile(times, 0.5) * 1000, 3),
            "commit_ms_worst": round(max(times, default=0.0) * 1000, 2),
            "commits_over_2ms": sum(1 for t in times if t > 0.002)}))

    try:
        say("READY", reach.url)
        await serve_commands(handle)
    finally:
        await reach.stop()


async def role_reach_agent(args: argparse.Namespace) -> None:
    """``--agents N`` Agent objects named echo-0.., each serving ``echo.run``."""
    from reach import Agent

    params = SCHEMA if args.schema else {}
    agents = []
    for i in range(args.agents):
        agent = Agent(f"echo-{i}", max_concurrency=256)

        @agent.capability("echo.run", params=params, idempotent=True,
                          latency_ms=args.latency_ms)
        async def echo(**params: Any) -> dict[str, Any]:
            return params

        agents.append(agent)
    await asyncio.gather(*(a.connect(args.url) for a in agents))
    try:
        say("READY", args.url)
        await serve_commands()
    finally:
        await asyncio.gather(*(a.close(drain=2.0) for a in agents), return_exceptions=True)


class ReachCaller:
    """``client.call("echo.run", PAYLOAD)``: submit, route, deliver, answer."""

    def __init__(self) -> None:
        self._client: Any = None

    async def open(self, url: str) -> None:
        from reach import Client
        # A coordinator that died mid-run shows up as errors within seconds, not a minute.
        self._client = await Client.connect(url, caller="bench", reconnect_for=5.0)

    async def prepare(self, inflight: int) -> None:
        pass

    async def call(self) -> Any:
        return await self._client.call("echo.run", PAYLOAD)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


async def role_reach_caller(args: argparse.Namespace) -> None:
    await serve_caller(ReachCaller(), args.url)


ROLES: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "reach": role_reach, "reach-agent": role_reach_agent, "reach-caller": role_reach_caller}


# -------------------------------------------------------------------- parent side


async def launch(chain: Chain, launcher: Launcher) -> None:
    """Coordinator, then its agents (registered), then the caller."""
    p = chain.params
    store = ("sqlite:///" + os.path.join(launcher.work_dir, f"{chain.name}.db")
             if p["store"] == "file" else "sqlite://")
    chain.middle, url = await launcher.start(
        f"{chain.name}-middle", role("reach", "--port", "0", "--store", store))
    schema = ["--schema"] if p["schema"] else []
    chain.agent, _ = await launcher.start(
        f"{chain.name}-agent", role("reach-agent", "--url", url, "--agents", str(p["agents"]),
                                    "--latency-ms", str(p["latency_ms"]), *schema))
    chain.caller, _ = await launcher.start(f"{chain.name}-caller",
                                           role("reach-caller", "--url", url))


def _chain(name: str, store: str, agents: int, schema: bool, latency_ms: float) -> Chain:
    what = ("SQLite file (durable)" if store == "file" else "in-memory SQLite")
    setup = (f"{what}, {agents} agent{'s' if agents > 1 else ''} in one process, "
             f"{'params schema' if schema else 'no schema'}")
    return Chain(name, "reach", launch, setup,
                 params={"store": store, "agents": agents, "schema": schema,
                         "latency_ms": latency_ms})


BASE = {"reach-sqlite-file": ("file", 1, False), "reach-memory": ("memory", 1, False)}
MATRIX = {
    "reach-file-8ag": ("file", 8, False),
    "reach-file-32ag": ("file", 32, False),
    "reach-memory-32ag": ("memory", 32, False),
    "reach-file-schema": ("file", 1, True),
    "reach-file-32ag-schema": ("file", 32, True),
}
QUICK_MATRIX = ("reach-file-32ag-schema",)  # one row that takes both costly paths


def chains(matrix: bool, quick: bool, latency_ms: float) -> list[Chain]:
    """The base rows, and the matrix rows when asked (one of them under ``--quick``)."""
    chosen = dict(BASE)
    if matrix:
        chosen.update({k: v for k, v in MATRIX.items() if not quick or k in QUICK_MATRIX})
    return [_chain(name, *spec, latency_ms) for name, spec in chosen.items()]
