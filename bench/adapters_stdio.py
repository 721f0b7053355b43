#!/usr/bin/env python3
"""Stdio process agents: calls through Reach beside the same echo process driven directly over
its pipe, in one run, one table.

    python bench/adapters_stdio.py                 # 3 rounds, median per row (~30 s)
    python bench/adapters_stdio.py --quick         # a smoke run (a few seconds)
    python bench/adapters_stdio.py --profile /tmp/p   # + pyinstrument of the coordinator

The two rows differ only in what sits behind one ``call()`` of the same caller code, each in
a caller process of its own (``--role caller``), with the same ~200-byte payload:

    direct-pipe    caller ──JSON lines over its pipe──▶ echo process (the caller's child)
    through-reach  caller (Client) ──ws──▶ Reach ──ProcessAgent stdio──▶ echo process
    reach-ws-agent caller (Client) ──ws──▶ Reach ──ws──▶ Agent SDK echo (reference: the
                   same coordinator path to a native agent, so the adapter's share shows)

The echo process (``--role echo``) is the same program in both: it reads stdin in blocks,
answers every complete request line ``{"id", "params", ...}`` with ``{"id", "result": params}``
and writes the answers of one block at once. Targets (issue 12): through-Reach calls/s at 32
in flight ≥ 60 % of direct, p50 at 1 in flight ≤ 2× direct. A miss is printed as MISS; it
never makes the exit status non-zero. Below the table, the CPU each process spent per call
says where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PAYLOAD: dict[str, Any] = {"data": "x" * 200}
TARGET_RATE = 0.60  # through-Reach calls/s at 32 in flight ≥ 60 % of direct
TARGET_P50 = 2.0    # through-Reach p50 at 1 in flight ≤ 2× direct
HIGH, LOW = 32, 1
CAPABILITY = "echo.run"
WS_CAPABILITY = "echo.ws"
ROWS = ("direct-pipe", "through-reach", "reach-ws-agent")


# =====================================================================================
# the echo process
# =====================================================================================


def echo() -> None:
    """Answer every request line on stdin with its params; exit at end of input."""
    pending = b""
    while block := os.read(0, 1 << 16):
        lines = (pending + block).split(b"\n")
        pending = lines.pop()
        out = []
        for line in lines:
            if line:
                msg = json.loads(line)
                if "params" in msg:
                    out.append(json.dumps({"id": msg["id"], "result": msg["params"]}))
        if out:
            os.write(1, ("\n".join(out) + "\n").encode())


# =====================================================================================
# the caller process: the same batches, behind one call() or the other
# =====================================================================================


class Pipe:
    """The direct path: the echo process as the caller's own child, JSON lines by id."""

    async def open(self, _: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE), "--role", "echo", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, limit=16 << 20)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.writer, self.reader = self.proc.stdin, self.proc.stdout
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.ids = 0
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while line := await self.reader.readline():
            msg = json.loads(line)
            fut = self.waiting.pop(msg["id"], None)
            if fut is not None:
                fut.set_result(msg["result"])

    async def call(self) -> Any:
        self.ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self.ids] = fut
        self.writer.write(json.dumps({"id": self.ids, "capability": CAPABILITY,
                                      "params": PAYLOAD}).encode() + b"\n")
        return await fut

    def pid(self) -> int:
        return self.proc.pid

    async def close(self) -> None:
        self.writer.close()
        await self.proc.wait()
        self.reading.cancel()


class ThroughReach:
    """The Reach path: a Client calling the coordinator, which holds the echo process (or,
    for the reference row, routes to a websocket agent)."""

    def __init__(self, capability: str) -> None:
        self.capability = capability

    async def open(self, url: str) -> None:
        from reach import Client

        self.client = await Client.connect(url, caller="bench")

    async def call(self) -> Any:
        return await self.client.call(self.capability, PAYLOAD)

    def pid(self) -> int:
        return 0

    async def close(self) -> None:
        await self.client.close()


async def batch(path: Pipe | ThroughReach, inflight: int, calls: int) -> dict[str, Any]:
    """``calls`` calls, ``inflight`` of them outstanding at any time: rate and percentiles."""
    latencies: list[float] = []
    errors = 0
    left = calls

    async def worker() -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1
            began = time.perf_counter()
            try:
                await path.call()
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - began)

    cpu, began = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    took = time.perf_counter() - began
    latencies.sort()
    return {"rate": len(latencies) / took, "p50_ms": percentile(latencies, 0.50) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3, "errors": errors,
            "caller_cpu_s": time.process_time() - cpu}


def percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def caller(kind: str, url: str) -> None:
    """Run the batches the parent asks for on stdin (``run INFLIGHT CALLS``), one JSON line
    of results each on stdout; ``pid`` answers the echo process's pid (direct path)."""
    path: Pipe | ThroughReach = Pipe() if kind == "direct" else ThroughReach(
        WS_CAPABILITY if kind == "ws" else CAPABILITY)
    await path.open(url)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(json.dumps({"ready": True, "echo_pid": path.pid()}), flush=True)
    while line := await reader.readline():
        _, inflight, calls = line.split()
        print(json.dumps(await batch(path, int(inflight), int(calls))), flush=True)
    await path.close()


async def ws_agent(url: str) -> None:
    """The reference row's agent: the Agent SDK serving the same echo; ends at end of stdin."""
    from reach import Agent

    agent = Agent("ws-echo", max_concurrency=64)

    @agent.capability(WS_CAPABILITY, idempotent=True, latency_ms=50)
    async def echo_ws(**params: Any) -> dict[str, Any]:
        return params

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with agent.connect(url):
        print(json.dumps({"ready": True}), flush=True)
        await reader.read()


# =====================================================================================
# the parent: Reach, the callers, the rounds and the table
# =====================================================================================


class Child:
    """One caller process, driven over stdin; stopping its stdin ends it."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind, self.url = kind, url

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE), "--role", "caller", self.kind, self.url,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        self.echo_pid = json.loads(await self._line()).get("echo_pid", 0)

    async def _line(self) -> bytes:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if not line:
            raise RuntimeError(f"the {self.kind} caller ended early")
        return line

    async def run(self, inflight: int, calls: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {inflight} {calls}\n".encode())
        return dict(json.loads(await self._line()))

    async def stop(self) -> None:
        if self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def cpu_of(pid: int) -> float:
    """CPU seconds a process has used (Linux /proc); NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.nan


async def measure(quick: bool, rounds: int, profile: str | None) -> int:
    from reach import Reach
    from reach.adapters import ProcessAgent

    sizes = {HIGH: 400, LOW: 150} if quick else {HIGH: 6000, LOW: 1500}
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    async with Reach.start() as reach:
        agent = ProcessAgent("echo", [sys.executable, str(HERE), "--role", "echo"],
                             {CAPABILITY: {"latency_ms": 50, "idempotent": True}},
                             mode="stdio", max_concurrency=64)
        await reach.attach(agent)
        children = {"direct-pipe": Child("direct", ""),
                    "through-reach": Child("reach", reach.url),
                    "reach-ws-agent": Child("ws", reach.url)}
        ws = Child("agent", reach.url)
        try:
            await ws.start()
            for child in children.values():
                await child.start()
            for child in children.values():  # warm-up, uncounted
                await child.run(HIGH, sizes[HIGH] // 4)
                await child.run(LOW, sizes[LOW] // 4)
            order = list(children)
            for r in range(rounds):
                for name in order[r % 3:] + order[:r % 3]:
                    child = children[name]
                    echo_pid = {"through-reach": agent.pid, "direct-pipe": child.echo_pid,
                                "reach-ws-agent": ws.proc.pid}[name]
                    for level in (HIGH, LOW):
                        cpu, echo_cpu = time.process_time(), cpu_of(echo_pid or 0)
                        row = await child.run(level, sizes[level])
                        calls = sizes[level] - row["errors"]
                        row["cpu_us"] = [row["caller_cpu_s"] / calls * 1e6,
                                         (time.process_time() - cpu) / calls * 1e6
                                         if name != "direct-pipe" else math.nan,
                                         (cpu_of(echo_pid or 0) - echo_cpu) / calls * 1e6]
                        results.setdefault((name, level), []).append(row)
            if profile:
                await profiled(children["through-reach"], sizes[HIGH], profile)
        finally:
            for child in [*children.values(), ws]:
                await child.stop()
    report(results, sizes, rounds)
    return 0


async def profiled(child: Child, calls: int, where: str) -> None:
    """One extra batch at 32 in flight with the coordinator (this process) profiled."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    await child.run(HIGH, calls)
    profiler.stop()
    Path(where).mkdir(parents=True, exist_ok=True)
    out = Path(where) / "adapters_stdio_coordinator.txt"
    out.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    print(f"profile of the coordinator during {calls} calls @{HIGH}: {out}")


def median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if not math.isnan(r[key])]
    return statistics.median(values) if values else math.nan


def report(results: dict[tuple[str, int], list[dict[str, Any]]], sizes: dict[int, int],
           rounds: int) -> None:
    from reach import __version__

    print(f"stdio process agents, agent-reach {__version__}, python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; payload {len(json.dumps(PAYLOAD))} "
          f"bytes; calls per batch: {sizes[HIGH]} @{HIGH}, {sizes[LOW]} @{LOW}; "
          f"{rounds} round(s), median\n")
    print("| path | in flight | calls/s | p50 ms | p99 ms | calls/s vs direct | "
          "p50 vs direct | errors |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    summary: dict[tuple[str, int], dict[str, float]] = {}
    for level in (HIGH, LOW):
        for name in ROWS:
            rows = results[name, level]
            summary[name, level] = s = {k: median(rows, k) for k in ("rate", "p50_ms",
                                                                    "p99_ms")}
            base = summary["direct-pipe", level]
            print(f"| {name} | {level} | {s['rate']:,.0f} | {s['p50_ms']:.3f} | "
                  f"{s['p99_ms']:.3f} | {s['rate'] / base['rate']:.0%} | "
                  f"{s['p50_ms'] / base['p50_ms']:.2f}x | "
                  f"{sum(r['errors'] for r in rows)} |")
    rate = summary["through-reach", HIGH]["rate"] / summary["direct-pipe", HIGH]["rate"]
    p50 = summary["through-reach", LOW]["p50_ms"] / summary["direct-pipe", LOW]["p50_ms"]
    print("\ntargets (through-reach against direct-pipe, this run):\n")
    print(f"- calls/s @{HIGH} >= {TARGET_RATE:.0%} of direct: {rate:.0%} "
          f"{'PASS' if rate >= TARGET_RATE else 'MISS'}")
    print(f"- p50 @{LOW} <= {TARGET_P50:.0f}x direct: {p50:.2f}x "
          f"{'PASS' if p50 <= TARGET_P50 else 'MISS'}")
    native = summary["through-reach", HIGH]["rate"] / summary["reach-ws-agent", HIGH]["rate"]
    native_p50 = (summary["through-reach", LOW]["p50_ms"]
                  / summary["reach-ws-agent", LOW]["p50_ms"])
    print(f"- (for reading the misses) through-reach against reach-ws-agent, the same "
          f"coordinator path to a native agent: calls/s @{HIGH} {native:.0%}, p50 @{LOW} "
          f"{native_p50:.2f}x")
    print("\n| CPU us per call | in flight | caller | coordinator | echo (agent) | total |")
    print("|---|--:|--:|--:|--:|--:|")
    for level in (HIGH, LOW):
        for name in ROWS:
            cells = [statistics.median([r["cpu_us"][i] for r in results[name, level]])
                     for i in range(3)]
            total = sum(c for c in cells if not math.isnan(c))
            shown = ["-" if math.isnan(c) else f"{c:,.0f}" for c in cells]
            print(f"| {name} | {level} | {' | '.join(shown)} | {total:,.0f} |")


def main(quick: bool, rounds: int | None = None, profile: str | None = None) -> int:
    """Run the comparison and print its tables (bench/adapters.py calls this)."""
    return asyncio.run(measure(quick, rounds or (1 if quick else 3), profile))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; 1 quick)")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="profile the coordinator during one extra batch (pyinstrument)")
    parser.add_argument("--role", nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role and args.role[0] == "echo":
        echo()
    elif args.role and args.role[0] == "caller" and args.role[1] == "agent":
        asyncio.run(ws_agent(args.role[2]))
    elif args.role and args.role[0] == "caller":
        asyncio.run(caller(args.role[1], args.role[2] if len(args.role) > 2 else ""))
    else:
        sys.exit(main(args.quick, args.rounds, args.profile))
