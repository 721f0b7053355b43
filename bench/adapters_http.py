#!/usr/bin/env python3
"""HTTP agents: calls through Reach to an HTTP service against the same service called
directly with the best client (bench/http_clients.py: aiohttp), in one run.

    python bench/adapters_http.py                   # 3 rounds, median per row (~30 s)
    python bench/adapters_http.py --quick           # 1 short round (a few seconds)
    python bench/adapters_http.py --profile /tmp/p  # + pyinstrument of the coordinator

The rows, each measured at 32 calls in flight (calls/s) and at 1 (p50), ~200-byte payload:

    direct         caller (aiohttp.ClientSession) ──HTTP──▶ aiohttp.web echo
    through-reach  caller (reach Client) ──ws──▶ coordinator (HttpAgent) ──HTTP──▶ same echo
    reach-ws       caller (reach Client) ──ws──▶ same coordinator ──ws──▶ Agent SDK echo

reach-ws is not targeted: it shows what the coordinator costs a call with the websocket agent
it was built for, so the CPU table tells the adapter's share from the coordinator's own. The
echo server, the coordinator and the websocket agent are child processes (``--role``); the
callers run in this process, rows interleaved per round. Targets: through-Reach calls/s
≥ 60 % of direct at 32 in flight, p50 ≤ 2× direct at 1 in flight; PASS/MISS is printed, never
asserted. The CPU columns say where a call's time goes (µs of CPU per call in each process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Launcher, batch, say, serve_commands
from http_clients import AiohttpCaller, start_echo

SCRIPT = Path(__file__).resolve()
HIGH, LOW = 32, 1
TARGET_RATE = 0.60  # through Reach ≥ 60 % of direct calls/s at 32 in flight
TARGET_P50 = 2.0    # through Reach p50 ≤ 2× direct at 1 in flight
ROWS = ("direct", "through-reach", "reach-ws")


# ------------------------------------------------------------------ the coordinator (child)


async def serve_reach(echo_url: str) -> None:
    """A coordinator with the echo attached as an HttpAgent; READY with its websocket URL."""
    from reach import Reach
    from reach.adapters import HttpAgent

    async with Reach.start() as reach:
        await reach.attach(HttpAgent(
            "echo", echo_url, {"echo.run": {"path": "/echo", "idempotent": True,
                                            "latency_ms": 100}},
            health="/healthz", max_concurrency=64))
        say("READY", reach.url)
        await serve_commands()


async def serve_ws_agent(url: str) -> None:
    """A websocket agent serving ``echo.ws`` (the params back) to the coordinator at ``url``."""
    from reach import Agent

    agent = Agent("echo-ws", max_concurrency=64)

    @agent.capability("echo.ws", idempotent=True, latency_ms=100)
    async def echo(**params: Any) -> dict[str, Any]:
        return params

    async with agent.connect(url):
        say("READY", url)
        await serve_commands()


class ReachCaller:
    """``client.call(capability, PAYLOAD)`` over one Client connection."""

    def __init__(self, capability: str) -> None:
        self.capability = capability
        self.client: Any = None

    async def open(self, url: str) -> None:
        from reach import Client
        self.client = await Client.connect(url, caller="bench")

    async def call(self) -> Any:
        from harness import PAYLOAD
        return await self.client.call(self.capability, PAYLOAD)

    async def close(self) -> None:
        await self.client.close()


# ------------------------------------------------------------------ the run


async def measure(quick: bool, rounds: int, profile: str | None,
                  profiler: str = "pyinstrument") -> dict[str, Any]:
    calls = {HIGH: 400, LOW: 100} if quick else {HIGH: 4000, LOW: 600}
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="reach-bench-http-") as tmp:
        launcher = Launcher(tmp, tmp)
        try:
            echo_url = await start_echo(launcher)
            echo = launcher.children[-1]
            coordinator, ws_url = await launcher.start(
                "coordinator", [str(SCRIPT), "--role", "reach", echo_url])
            agent, _ = await launcher.start("ws-agent", [str(SCRIPT), "--role", "ws-agent",
                                                         ws_url])
            callers: dict[str, Any] = {"direct": AiohttpCaller(),
                                       "through-reach": ReachCaller("echo.run"),
                                       "reach-ws": ReachCaller("echo.ws")}
            await callers["direct"].open(echo_url)
            await callers["through-reach"].open(ws_url)
            await callers["reach-ws"].open(ws_url)
            children = {"coordinator": coordinator, "echo": echo, "agent": agent}

            async def cpu() -> dict[str, float]:
                out = {"caller": time.process_time()}
                for name, child in children.items():
                    out[name] = float(await child.request("cpu", "CPU", 10))
                return out

            try:
                for row in ROWS:  # warm: pools, connections, code paths
                    await batch(callers[row].call, HIGH, calls[HIGH] // 4, 60)
                    await batch(callers[row].call, LOW, calls[LOW] // 4, 60)
                for r in range(rounds):
                    for level in (HIGH, LOW):
                        for row in ROWS if r % 2 == 0 else ROWS[::-1]:
                            before = await cpu()
                            res = await batch(callers[row].call, level, calls[level], 120)
                            after = await cpu()
                            res["cpu_us"] = {k: (after[k] - before[k]) * 1e6 / max(1, res["ok"])
                                             for k in after}
                            results.setdefault((row, level), []).append(res)
                if profile:  # one extra, uncounted batch per Reach row
                    os.makedirs(profile, exist_ok=True)
                    paths = []
                    for row in ROWS[1:]:
                        paths.append(os.path.join(profile, f"coordinator-{row}.txt"))
                        await coordinator.request(f"profile-start {profiler}", "OK", 10)
                        await batch(callers[row].call, HIGH, calls[HIGH], 120)
                        await coordinator.request(f"profile-stop {paths[-1]}", "OK", 60)
                    results["profile"] = " ".join(paths)  # type: ignore[index]
            finally:
                for c in callers.values():
                    await c.close()
        finally:
            await launcher.stop()
    return results  # type: ignore[return-value]


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def report(results: dict[Any, Any]) -> str:
    lines = ["| row | in flight | calls/s | p50 ms | p99 ms | CPU µs/call: caller | "
             "coordinator | agent | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    med: dict[tuple[str, int], dict[str, float]] = {}
    for level in (HIGH, LOW):
        for row in ROWS:
            rows = results[row, level]
            m = med[row, level] = {"rate": _median(rows, "rate"), "p50": _median(rows, "p50_ms"),
                                   "p99": _median(rows, "p99_ms")}
            cpu = {k: statistics.median(r["cpu_us"][k] for r in rows)
                   for k in ("caller", "coordinator", "echo", "agent")}
            middle = "-" if row == "direct" else f"{cpu['coordinator']:.0f}"
            served = cpu["agent"] if row == "reach-ws" else cpu["echo"]
            errors = sum(r["errors"] for r in rows)
            lines.append(f"| {row} | {level} | {m['rate']:.0f} | {m['p50']:.3f} | "
                         f"{m['p99']:.3f} | {cpu['caller']:.0f} | {middle} | {served:.0f} | "
                         f"{errors} |")
    rate = med["through-reach", HIGH]["rate"] / med["direct", HIGH]["rate"]
    p50 = med["through-reach", LOW]["p50"] / med["direct", LOW]["p50"]
    lines += ["", "| target | got | verdict |", "|---|---:|---|",
              f"| through-Reach calls/s ≥ {TARGET_RATE:.0%} of direct at {HIGH} in flight | "
              f"{rate:.0%} | {'PASS' if rate >= TARGET_RATE else 'MISS'} |",
              f"| through-Reach p50 ≤ {TARGET_P50:g}× direct at {LOW} in flight | "
              f"{p50:.2f}× | {'PASS' if p50 <= TARGET_P50 else 'MISS'} |"]
    if "profile" in results:
        lines += ["", f"coordinator profiles (one batch at {HIGH} per Reach row): "
                  f"{results['profile']}"]
    return "\n".join(lines)


def main(quick: bool, rounds: int | None = None, profile: str | None = None,
         profiler: str = "pyinstrument") -> int:
    print(f"## HTTP agents: through Reach vs direct (aiohttp) to one aiohttp.web echo "
          f"on loopback, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}\n")
    results = asyncio.run(measure(quick, rounds or (1 if quick else 3), profile, profiler))
    print(report(results))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--profile", metavar="DIR")
    parser.add_argument("--profiler", choices=["pyinstrument", "cprofile"],
                        default="pyinstrument")
    parser.add_argument("--role", choices=["reach", "ws-agent"])
    parser.add_argument("url", nargs="?", help="(roles) the echo's or coordinator's URL")
    args = parser.parse_args()
    if args.role:
        asyncio.run(serve_reach(args.url) if args.role == "reach" else serve_ws_agent(args.url))
        sys.exit(0)
    sys.exit(main(args.quick, args.rounds, args.profile, args.profiler))
