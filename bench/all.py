#!/usr/bin/env python3
"""``make bench``: every benchmark in one run, written to docs/benchmarks.md.

    python bench/all.py                   # full run, rewrites docs/benchmarks.md
    python bench/all.py --quick --out -   # smoke sizes, to stdout only

Each benchmark runs as its own process (one after the other, so they do not compete for the
two cores) and prints its own tables with ratios against baselines measured in the same run.
This script shows their output live and collects it, with the machine and the date, into one
Markdown file. A benchmark that fails is reported in the file and makes the exit status
non-zero; a missed target does not (it is a finding, printed as MISS).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (title, script, what it answers)
BENCHES: list[tuple[str, str, str]] = [
    ("Calls: Reach against the raw floor and the peers", "bench/relay.py",
     "calls/s and latency through Reach, a raw websockets relay, Celery+Redis, NATS "
     "request-reply and a direct HTTP call, side by side"),
    ("Registry scale and routing", "bench/registry.py",
     "routing decision time at 1 to 10,000 agents; heartbeat cost, memory per agent and "
     "liveness sweep cost with thousands of connected agents"),
    ("Durable submits", "bench/durable.py",
     "submits/s acknowledged after commit on a SQLite file: group commit against one commit "
     "per task"),
    ("Hostile peers: each attack against a fresh coordinator", "bench/hostile.py",
     "remote and file $ref schemas, ReDoS, registration and connection floods, capability "
     "capture, reading other callers' work, a reader that never reads, deep nesting and "
     "hostile names: the worst stall a legitimate call saw during each, the coordinator's "
     "peak RSS and what the attacker got back, beside a quiet baseline"),
]
BENCHES.append(
    ("Adapter agents: through Reach against direct calls", "bench/adapters.py",
     "calls/s at 32 in flight and p50 at 1 in flight to an HTTP service through an HttpAgent "
     "and to a stdio process through a ProcessAgent, each against the same agent called "
     "directly (the best HTTP client; the process's own pipe)"))
BENCHES.append(
    ("Intent routing: the labelled set and the cost of a match", "bench/intent.py",
     "top-1 accuracy, wrong-route and abstain rates of intent routing on 272 labelled "
     "phrasings (Chinese, English, mixed; dev and held-out halves) over 24 capabilities, "
     "against the matcher it replaced, and the cost of one resolve at 20 and 500 "
     "capabilities"))
BENCHES.append(
    ("Several coordinators on one PostgreSQL", "bench/cluster.py",
     "calls/s and p50 for 1, 2 and 3 `reach serve --cluster` subprocesses on one PostgreSQL "
     "database against one coordinator on SQLite; the cross-node hop's added p50; fail-over "
     "time after a SIGKILL (the agent's move, the first task completed elsewhere). On 2 "
     "cores more nodes cannot be faster: docs/cluster.md says what the numbers mean"))
SOAK = ("Soak: faults, kills and a coordinator restart", "bench/soak.py",
        "10,000 tasks with 20 % injected faults, agent SIGKILLs and a coordinator SIGKILL: "
        "nothing lost, no key run twice")


def _machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return (f"{platform.system()} {platform.release()}, {os.cpu_count()} cpu, "
            f"Python {platform.python_version()}, load {load[0]:.2f} at start")


def run(script: str, quick: bool) -> tuple[int, str, float]:
    """Run one benchmark, echoing its output as it comes; returns (status, output, seconds)."""
    argv = [sys.executable, str(ROOT / script)] + (["--quick"] if quick else [])
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    return proc.wait(), "".join(lines), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run every benchmark in bench/ and write their tables to a Markdown file.")
    parser.add_argument("--quick", action="store_true",
                        help="smoke sizes (seconds, not minutes); numbers mean little")
    parser.add_argument("--soak", action="store_true",
                        help="also run bench/soak.py (about a minute more)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"),
                        help="where to write the report ('-': nowhere; default docs/benchmarks.md)")
    parser.add_argument("--only", nargs="*", default=None, metavar="SCRIPT",
                        help="run only these scripts (e.g. bench/durable.py)")
    args = parser.parse_args(argv)

    benches = BENCHES + ([SOAK] if args.soak else [])
    if args.only:
        benches = [b for b in benches if b[1] in args.only]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Benchmarks\n",
        f"`make bench` on {stamp}: {_machine()}.\n",
        "Every ratio compares numbers measured in the same run on the same machine; shared "
        "machines move absolute numbers by ±10 % or more between runs, so read the ratios. "
        "Targets print PASS or MISS; a miss is a finding, not a failure of the run.\n",
        "Where the coordinator's time goes, what was tried to cut it and what it gained: "
        "[performance.md](performance.md).\n",
    ]
    failed = []
    for title, script, what in benches:
        print(f"\n=== {script}", flush=True)
        status, output, took = run(script, args.quick)
        parts.append(f"\n## {title}\n\n{what}. `python {script}` ({took:.0f} s"
                     + (", exit status " + str(status) if status else "") + "):\n")
        parts.append("\n```\n" + output.rstrip() + "\n```\n")
        if status:
            failed.append(script)
    if args.out != "-":
        Path(args.out).write_text("\n".join(parts))
        print(f"\nwrote {args.out}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
