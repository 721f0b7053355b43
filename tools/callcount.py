#!/usr/bin/env python3
"""The coordinator's work per call, as a count: Python and C function calls (cProfile's total)
made in the coordinator's process per synchronous call, not seconds.

    python tools/callcount.py                       # SQLite file store, 1 and 16 in flight
    python tools/callcount.py --store memory --calls 2000 --inflight 1 64
    python tools/callcount.py --top 25              # ... and where the calls go
    python tools/callcount.py --inflight 64 --agents 32   # what a fleet of 32 adds
    python tools/callcount.py --side sdk --top 25   # the SDKs' side: caller and agent together
    python tools/callcount.py --json

A real coordinator (``Reach.start`` with a SQLite file in a temporary directory, or the
in-memory store) runs in this process; a real websocket agent and a real ``Client`` run in a
child process, so only the coordinator's work is counted. After a warm-up the child waits for
``go``, makes ``--calls`` calls with ``K`` in flight and says ``done``; the profile covers
exactly that window. Heartbeats are an hour apart so no timer of the agent's falls inside it.
With ``--side sdk`` the child counts itself instead over the same window (the caller's and the
agent's work together: at 64 in flight on two cores they share the bottleneck with the
coordinator, docs/performance.md) and hands its profile to the parent in a file.

A count does not depend on how loaded the machine is, which is why the per-call budget test
(tests/test_call_budget.py, budget in bench/call_budget.toml) uses it and never a time. What
still moves it a little: how the loop batches frames that arrive together (more in flight, more
variation) and the 5 ms loop-lag timer, whose ticks depend on how long the window lasts.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from typing import Any

WARMUP = 200
PAYLOAD = {"region": "east", "quarter": "Q3", "rows": list(range(20)), "note": "x" * 64}


# The child: an agent and a caller -------------------------------------------------------------

async def child(url: str, calls: int, inflight: int, agents: int = 1,
                profile_to: str | None = None, profiled: bool = True) -> None:
    from reach import Agent, Client

    fleet = [Agent("echo" if agents == 1 else f"echo-{i}", max_concurrency=max(64, inflight))
             for i in range(agents)]
    for agent in fleet:
        @agent.capability("echo.run", idempotent=True, latency_ms=200)
        async def echo(**params: Any) -> dict[str, Any]:
            return params

        await agent.connect(url)
    client = await Client.connect(url, caller="counter")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def run(n: int) -> None:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await client.call("echo.run", PAYLOAD, timeout=30)

        await asyncio.gather(*(worker() for _ in range(min(inflight, n))))

    await run(WARMUP)
    print("ready", flush=True)
    await reader.readline()
    if profile_to is None:
        await run(calls)
    else:  # --side sdk: this process is the one counted
        gc.collect()
        profile, cpu = cProfile.Profile(), time.process_time()
        if profiled:
            profile.enable()
        await run(calls)
        profile.disable()
        cpu = time.process_time() - cpu
        if profiled:
            profile.dump_stats(profile_to)
        else:
            with open(profile_to, "w") as f:
                f.write(repr(cpu))
    print("done", flush=True)
    await reader.readline()
    await client.close()
    for agent in fleet:
        await agent.close(drain=0)


# The parent: the coordinator, counted ---------------------------------------------------------

async def measure(store: str, calls: int, inflight: int, profiled: bool = True,
                  agents: int = 1, side: str = "coordinator") -> pstats.Stats | float:
    """Profile the coordinator (``side="sdk"``: the caller's and agent's process) over
    ``calls`` calls at ``inflight`` in flight; or, not ``profiled``, that process's CPU
    seconds over them (no profiler slowing it)."""
    from reach import Reach

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/reach.db" if store == "sqlite" else None
        options: dict[str, Any] = {"heartbeat_interval": 3600}
        if url:
            options["store"] = url
        sdk = side == "sdk"
        handed = os.path.join(tmp, "sdk.prof")
        async with Reach.start(**options) as reach:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--child", reach.url, str(calls), str(inflight),
                "--agents", str(agents), *(("--profile-to", handed) if sdk else ()),
                *(("--cpu",) if sdk and not profiled else ()),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
            assert proc.stdin is not None and proc.stdout is not None
            try:
                if (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() != b"ready":
                    raise SystemExit("callcount: the child did not get ready (see stderr)")
                gc.collect()
                profile = cProfile.Profile()
                cpu = time.process_time()
                if profiled and not sdk:
                    profile.enable()
                proc.stdin.write(b"go\n")
                line = await asyncio.wait_for(proc.stdout.readline(), 300)
                profile.disable()
                cpu = time.process_time() - cpu
                if line.strip() != b"done":
                    raise SystemExit("callcount: the child stopped before it was done")
                proc.stdin.write(b"bye\n")
                await asyncio.wait_for(proc.wait(), 30)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        if sdk and profiled:
            return pstats.Stats(handed)
        if sdk:
            with open(handed) as f:
                return float(f.read())
    return pstats.Stats(profile) if profiled else cpu


def per_call(stats: pstats.Stats, calls: int) -> float:
    return float(stats.total_calls) / calls  # type: ignore[attr-defined]


def top(stats: pstats.Stats, calls: int, n: int) -> list[tuple[str, float]]:
    """The functions called most per call, and each module's share."""
    rows: Counter[str] = Counter()
    for (path, line, name), (_cc, nc, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        where = os.path.relpath(path) if path.startswith("/") else path
        rows[f"{where}:{line}({name})"] += nc
    return [(k, v / calls) for k, v in rows.most_common(n)]


def by_module(stats: pstats.Stats, calls: int, n: int) -> list[tuple[str, float]]:
    rows: Counter[str] = Counter()
    for (path, _line, _name), (_cc, nc, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        rows[os.path.relpath(path) if path.startswith("/") else path] += nc
    return [(k, v / calls) for k, v in rows.most_common(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite",
                        help="the coordinator's store: a SQLite file (default) or in memory")
    parser.add_argument("--calls", type=int, default=1000, help="calls counted per run")
    parser.add_argument("--inflight", type=int, nargs="+", default=[1, 16],
                        help="calls in flight, one run each (default: 1 16)")
    parser.add_argument("--top", type=int, default=0,
                        help="also list the N functions and modules with the most calls")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cpu", action="store_true",
                        help="no profiler: the counted process's CPU µs a call instead of a count "
                             "(noisy on a shared machine; under valgrind's callgrind, run at two "
                             "--calls and take the difference of the instruction totals: "
                             "docs/performance.md)")
    parser.add_argument("--agents", type=int, default=1,
                        help="echo agents serving the capability (default 1; 32: what fleet "
                             "size costs a call)")
    parser.add_argument("--side", choices=("coordinator", "sdk"), default="coordinator",
                        help="whose work is counted: the coordinator's (default) or the SDKs' "
                             "(the caller and the agent, one process)")
    parser.add_argument("--child", nargs=3, metavar=("URL", "CALLS", "INFLIGHT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        url, n, k = args.child
        asyncio.run(child(url, int(n), int(k), args.agents, args.profile_to, not args.cpu))
        return 0
    result: dict[str, Any] = {"store": args.store, "calls": args.calls, "per_call": {}}
    if args.cpu:
        for k in args.inflight:
            cpu = asyncio.run(measure(args.store, args.calls, k, False, args.agents, args.side))
            assert isinstance(cpu, float)
            print(f"{args.store}: {cpu / args.calls * 1e6:8.1f} CPU µs per call at {k} in flight "
                  f"({args.calls} calls, {args.side})")
        return 0
    for k in args.inflight:
        stats = asyncio.run(measure(args.store, args.calls, k, agents=args.agents,
                                    side=args.side))
        assert isinstance(stats, pstats.Stats)
        result["per_call"][str(k)] = round(per_call(stats, args.calls), 1)
        if args.top:
            result.setdefault("top", {})[str(k)] = top(stats, args.calls, args.top)
            result.setdefault("modules", {})[str(k)] = by_module(stats, args.calls, args.top)
    if args.json:
        print(json.dumps(result))
        return 0
    for k, count in result["per_call"].items():
        print(f"{args.store}: {count:8.1f} function calls per call at {k} in flight "
              f"({args.calls} calls, {args.side})")
        for title, key in (("functions", "top"), ("modules", "modules")):
            if key in result:
                print(f"  {title} with the most calls per call:")
                for name, v in result[key][k]:
                    print(f"    {v:8.2f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
