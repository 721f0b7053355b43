#!/usr/bin/env python3
"""Relay benchmark: caller → Reach → agent beside a raw websockets relay and the peers a team
would pick instead (Celery + Redis, NATS request-reply, direct HTTP), in one run, one table.

    python bench/relay.py                  # full run: 3 rounds, median per row (~2 min)
    python bench/relay.py --quick          # a tiny smoke run (a few seconds, no peers)
    python bench/relay.py --quick --peers --no-matrix      # ... with the peers (~10 s)
    python bench/relay.py --no-peers --no-matrix           # floor and the two Reach rows
    python bench/relay.py --only 'reach-file-*' nats-reqrep  # some rows (the floor is kept)
    python bench/relay.py --only reach-sqlite-file --profile pyinstrument --profile-dir /tmp/p

Every row is a chain of OS processes this script started (``--role``), driven over stdin, with
the same ~200-byte payload over loopback, 1 and 64 calls in flight:

    raw, raw-eager     caller ──ws──▶ raw relay (correlation ids only) ──ws──▶ echo agent
    reach-*            caller (Client) ──ws──▶ Reach coordinator ──ws──▶ Agent SDK echo
    celery-redis       caller ──▶ Redis ──▶ Celery worker ──▶ Redis ──▶ caller
    nats-reqrep        caller ──▶ nats-server ──▶ responders (queue group) ──▶ caller
    http-direct        caller (httpx) ──HTTP/1.1──▶ uvicorn echo app (-split: a client per call)

(floor.py, reach_chain.py and peers.py say how each is built; harness.py and report.py hold the
plumbing and the printing.) Ratios are taken against the *floor*, the best of the two raw
relays in this run, column by column. A row is the median over ``--rounds`` rounds; rows are
interleaved inside each round, their order rotated per round. Targets are printed with
PASS/MISS; a miss never makes the exit status non-zero. A peer whose service (Redis, NATS) is
not reachable is skipped with the reason; a peer that fails mid-run is dropped with a note.
Below the targets, the CPU time each process spent per call shows where the cost sits; ``-v``
adds per-round numbers and coordinator stats, ``--profile`` profiles the three processes of
each selected Reach row during one extra, uncounted batch at 64 in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import floor
import peers
import reach_chain
import report
from harness import PAYLOAD, Chain, ChildFailed, Launcher, Skip
from report import Summary, check, ratio

TARGET_THROUGHPUT = 0.50  # Reach calls/s at 64 in flight ≥ 50 % of the floor's
TARGET_P50 = 2.0          # Reach p50 at 1 in flight ≤ 2× the floor's
TARGET_VS_CELERY_RATE = 3.0   # Reach calls/s ≥ 3× Celery's (64 in flight)
TARGET_VS_CELERY_P50 = 1 / 3  # Reach p50 ≤ ⅓ of Celery's (1 in flight)
TARGET_VS_NATS_RATE = 0.8     # Reach calls/s ≥ 0.8× nats-py request-reply's (64 in flight)
TARGETED = ("reach-sqlite-file", "reach-memory")  # the rows the targets are checked for
LOW, HIGH = 1, 64
START_AT_ONCE = 6  # chains started concurrently (each is 2-3 Python processes importing)

ROLES: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    **floor.ROLES, **reach_chain.ROLES, **peers.ROLES}


# =====================================================================================
# the rows and the run
# =====================================================================================


def all_chains(args: argparse.Namespace) -> list[Chain]:
    """Every row this run would measure, in table order, before ``--only``."""
    rows = floor.chains() + reach_chain.chains(args.matrix, args.quick, args.latency_ms)
    if args.peers if args.peers is not None else not args.quick:
        rows += peers.chains(args.celery_pool, args.celery_concurrency)
    return rows


def select(chains: list[Chain], only: list[str] | None) -> list[Chain]:
    """The rows ``--only`` names (globs); the floor rows stay when none of them is named,
    because every ratio is taken against them."""
    if not only:
        return chains
    unknown = [p for p in only if not any(fnmatch.fnmatchcase(c.name, p) for c in chains)]
    if unknown:
        raise SystemExit(f"--only: no row matches {unknown}; rows: "
                         f"{' '.join(c.name for c in chains)} (see --list)")
    chosen = [c for c in chains if any(fnmatch.fnmatchcase(c.name, p) for p in only)]
    if not any(c.group == "floor" for c in chosen):
        chosen = [c for c in chains if c.group == "floor"] + chosen
    return chosen


async def start(chains: list[Chain], launcher: Launcher) -> dict[str, str]:
    """Start every chain (a few at a time); drops the peers that cannot run here and returns
    why ({name: reason}). A floor or Reach chain that fails to start is fatal."""
    gate = asyncio.Semaphore(START_AT_ONCE)
    skipped: dict[str, str] = {}

    async def one(chain: Chain) -> None:
        async with gate:
            try:
                await chain.launch(chain, launcher)
            except Skip as exc:
                skipped[chain.name] = str(exc)
            except ChildFailed as exc:
                if chain.group != "peer":
                    raise
                skipped[chain.name] = f"did not start: {exc}"
            if chain.name in skipped:
                await launcher.stop(chain.children)

    await asyncio.gather(*(one(c) for c in chains))
    chains[:] = [c for c in chains if c.name not in skipped]
    return skipped


async def measure(chains: list[Chain], launcher: Launcher, args: argparse.Namespace,
                  calls: dict[int, int], rounds: int, warmup: int) -> dict[str, str]:
    """Warm every chain up, then ``rounds`` rounds of one batch per chain and level. A peer
    that fails is dropped ({name: reason} returned); any other failure is fatal."""
    dropped: dict[str, str] = {}
    limit, budget = args.batch_timeout, args.batch_seconds

    async def batch(chain: Chain, level: int, n: int, pre: int) -> dict[str, object] | None:
        try:
            return await chain.run(level, n, pre, limit, budget)
        except ChildFailed as exc:
            if chain.group != "peer":
                raise
            dropped[chain.name] = f"failed during a batch: {exc}"
            chains.remove(chain)
            await launcher.stop(chain.children)
            return None

    for chain in list(chains):  # caches, pools, connections: all warm before measuring
        if await batch(chain, HIGH, warmup, 0) is not None:
            await batch(chain, LOW, max(1, warmup // 5), 0)
    for r in range(rounds):
        for level in (LOW, HIGH):
            order = chains[r % len(chains):] + chains[:r % len(chains)]
            for chain in order:
                if chain not in chains:
                    continue
                res = await batch(chain, level, calls[level], max(1, calls[level] // 20))
                if res is None:
                    continue
                chain.results.setdefault(level, []).append(res)
                if args.verbose:
                    print(f"  round {r + 1} {chain.name:<22} @{level:<3} {res['rate']:>8.0f}/s "
                          f"p50 {res['p50_ms']:.3f} ms p99 {res['p99_ms']:.3f} ms "
                          f"errors {res['errors']}", flush=True)
    return dropped


# =====================================================================================
# targets
# =====================================================================================


def targets(chains: list[Chain], summary: Summary, skipped: dict[str, str]) -> str:
    """PASS/MISS lines: Reach against the floor, then against Celery and NATS."""
    names = {c.name for c in chains}
    top, bottom = report.floor(chains, summary, HIGH), report.floor(chains, summary, LOW)
    lines = ["targets (against the floor: the best raw relay of this run, per column):"]
    for name in (n for n in TARGETED if n in names):
        rate = ratio(summary[name, HIGH]["rate"], top["rate"])
        p50 = ratio(summary[name, LOW]["p50"], bottom["p50"])
        lines.append(check(name, f"calls/s @{HIGH} >= {TARGET_THROUGHPUT:.0%} of the floor",
                           f"{rate:.0%}", rate >= TARGET_THROUGHPUT))
        lines.append(check(name, f"p50 @{LOW} <= {TARGET_P50:g}x the floor", f"{p50:.2f}x",
                           p50 <= TARGET_P50))
    peer_checks = (
        ("celery-redis", "rate", HIGH, TARGET_VS_CELERY_RATE,
         f"calls/s @{HIGH} >= {TARGET_VS_CELERY_RATE:g}x celery-redis"),
        ("celery-redis", "p50", LOW, TARGET_VS_CELERY_P50,
         f"p50 @{LOW} <= 1/{1 / TARGET_VS_CELERY_P50:g} of celery-redis"),
        ("nats-reqrep", "rate", HIGH, TARGET_VS_NATS_RATE,
         f"calls/s @{HIGH} >= {TARGET_VS_NATS_RATE:g}x nats-reqrep"),
    )
    lines.append("targets against the peers (ratio = Reach / peer):")
    for name in (n for n in TARGETED if n in names):
        for peer, key, level, bound, what in peer_checks:
            if peer not in names:
                why = skipped.get(peer, "not selected")
                lines.append(f"  {name:<22}  {what:<44}  {'n/a':>7}  SKIP ({why[:60]})")
                continue
            got = ratio(summary[name, level][key], summary[peer, level][key])
            ok = got >= bound if key == "rate" else got <= bound
            lines.append(check(name, what, f"{got:.2f}x", ok and not math.isnan(got)))
    return "\n".join(lines)


# =====================================================================================
# the parent
# =====================================================================================


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("websockets", "celery", "redis", "nats-py", "httpx", "uvicorn"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


async def parent(args: argparse.Namespace) -> int:
    if args.quick:
        calls = {LOW: args.calls_1 or 40, HIGH: args.calls or 200}
        rounds, warmup = args.rounds or 1, args.warmup if args.warmup is not None else 64
        args.batch_seconds = args.batch_seconds or 1.0
    else:
        calls = {LOW: args.calls_1 or 1000, HIGH: args.calls or 3000}
        rounds, warmup = args.rounds or 3, args.warmup if args.warmup is not None else 500
        args.batch_seconds = args.batch_seconds or 3.0
    chains = select(all_chains(args), args.only)
    if args.list:
        for chain in chains:
            print(f"{chain.name:<24} {chain.setup}")
        return 0
    print(report.header("Agent-Reach relay benchmark", _versions()))
    print(f"payload {len(json.dumps(PAYLOAD))} bytes of JSON; calls per batch: {calls[LOW]} "
          f"@{LOW}, {calls[HIGH]} @{HIGH}; rounds: {rounds} (median); warm-up: {warmup} "
          f"@{HIGH} + {max(1, warmup // 5)} @{LOW} per row, then 1/20 of a batch before each "
          f"batch; a batch starts no call after {args.batch_seconds:g} s; echo.run declares "
          f"latency_ms={args.latency_ms:g}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reach-bench-") as tmp:
        log_dir = tmp
        if args.log_dir:
            log_dir = os.path.abspath(args.log_dir)
            os.makedirs(log_dir, exist_ok=True)
        launcher = Launcher(log_dir, tmp)
        all_names = [c.name for c in chains]
        try:
            skipped = await start(chains, launcher)
            for name, why in skipped.items():
                print(f"skip {name}: {why}", flush=True)
            if args.verbose:
                print(f"started {len(launcher.children)} processes in "
                      f"{time.perf_counter() - started:.1f}s", flush=True)
            dropped = await measure(chains, launcher, args, calls, rounds, warmup)
            summary = report.summarize(chains, [LOW, HIGH])
            print()
            print(report.table(chains, [LOW, HIGH], summary))
            for name, why in dropped.items():
                print(f"dropped {name}: {why}")
            print()
            print(targets(chains, summary, {**skipped, **dropped}))
            print()
            print(report.cpu_table(chains, [LOW, HIGH]))
            print("(middle for celery-redis / nats-reqrep: the redis-server / nats-server "
                  "process; http-direct has none)")
            print()
            print("setup:")
            for chain in chains:
                print(f"  {chain.name:<22}  {chain.setup}")
            _notes(chains, args.batch_timeout, args.batch_seconds)
            if args.verbose or args.profile:
                for chain in (c for c in chains if c.group == "reach"):
                    assert chain.middle is not None
                    print(f"{chain.name} coordinator: "
                          f"{await chain.middle.request('stats', 'STATS', 10)}")
            if args.profile:
                await _profile([c for c in chains if c.group == "reach"], args, calls[HIGH])
            missing = [n for n in all_names if n not in {c.name for c in chains}]
            if missing:
                print(f"not measured: {' '.join(missing)} (see skip/dropped lines)")
            print(f"\ntotal {time.perf_counter() - started:.1f}s", flush=True)
        finally:
            await launcher.stop()
            for chain in chains:
                if chain.cleanup is not None:
                    try:
                        await chain.cleanup()
                    except Exception as exc:  # cleanup is best effort; say so
                        print(f"note: cleanup of {chain.name} failed: {exc}", file=sys.stderr)
    return 0


def _notes(chains: list[Chain], limit: float, budget: float) -> None:
    for chain in chains:
        for level, rows in sorted(chain.results.items()):
            done = [r["ok"] + r["errors"] for r in rows]
            if any(d < r["calls"] for d, r in zip(done, rows, strict=True)):
                span = f"{min(done)}" + (f"-{max(done)}" if max(done) > min(done) else "")
                print(f"note: {chain.name} @{level}: {span} calls per batch (a batch starts "
                      f"no call after {budget:g} s)")
    problems = [(c.name, lv, r["first_error"]) for c in chains
                for lv, rs in c.results.items() for r in rs if r["errors"]]
    for name, lv, err in problems[:6]:
        print(f"note: {name} @{lv} had errors, first: {err}")
    if any(r["timed_out"] for c in chains for rs in c.results.values() for r in rs):
        print(f"note: some batches hit the {limit:.0f}s batch limit (partial counts)")


async def _profile(chains: list[Chain], args: argparse.Namespace, calls: int) -> None:
    """One extra, uncounted batch per Reach row (``--profile-inflight`` calls in flight), its
    three processes profiled (the profiler's overhead slows that batch: its numbers are not
    comparable)."""
    inflight = args.profile_inflight
    out_dir = os.path.abspath(args.profile_dir or ".")
    os.makedirs(out_dir, exist_ok=True)
    for chain in chains:
        procs = {"caller": chain.caller, "coordinator": chain.middle, "agent": chain.agent}
        paths = {}
        for name, child in procs.items():
            assert child is not None
            paths[name] = os.path.join(
                out_dir, f"profile-{chain.name}-{inflight}-{name}-{args.profile}.txt")
            await child.request(f"profile-start {args.profile}", "OK", 10)
        res = await chain.run(inflight, calls, 0, args.batch_timeout)  # all, however slow
        for name, child in procs.items():
            assert child is not None
            await child.request(f"profile-stop {paths[name]}", "OK", 60)
        print(f"profiled {chain.name} @{inflight} ({res['rate']:.0f} calls/s under the profiler):")
        for name, path in paths.items():
            print(f"  {name:<12} {path}")


async def _cancel_on_sigterm(main: Awaitable[int]) -> int:
    """SIGTERM stops the parent like Ctrl-C does: its ``finally`` still stops every child."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    rows = ap.add_argument_group("which rows")
    rows.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                      help="measure celery-redis, nats-reqrep, http-direct and http-direct-split "
                           "(default: yes, but not with --quick, which stays a few seconds)")
    rows.add_argument("--matrix", action=argparse.BooleanOptionalAction, default=True,
                      help="measure the Reach matrix rows beside reach-sqlite-file and "
                           "reach-memory: 8/32 agents, memory at 32 agents, a params schema "
                           "at 1/32 agents (default: yes; --quick keeps only "
                           "reach-file-32ag-schema)")
    rows.add_argument("--only", nargs="+", metavar="NAME", default=None,
                      help="measure only these rows (names or globs such as 'reach-file-*'); "
                           "the raw floor rows are kept unless one is named")
    rows.add_argument("--list", action="store_true",
                      help="print the rows that would run, with how each is set up, and exit")
    size = ap.add_argument_group("how much")
    size.add_argument("--quick", action="store_true",
                      help="tiny smoke run (40 calls @1, 200 @64, 1 round): a few seconds")
    size.add_argument("--calls", type=int, default=None,
                      help="calls per batch at 64 in flight (default 3000; --quick 200)")
    size.add_argument("--calls-1", type=int, default=None,
                      help="calls per batch at 1 in flight (default 1000; --quick 40)")
    size.add_argument("--rounds", type=int, default=None,
                      help="rounds, the median is reported (default 3; --quick 1)")
    size.add_argument("--warmup", type=int, default=None,
                      help="warm-up calls per row at 64 in flight, a fifth of it at 1 "
                           "(default 500; --quick 64)")
    size.add_argument("--batch-seconds", type=float, default=None,
                      help="a batch starts no new call after this many seconds, so a slow "
                           "peer (Celery, http-direct) gives fewer calls instead of "
                           "stretching the run; the calls then in flight still count "
                           "(default 3; --quick 1)")
    size.add_argument("--batch-timeout", type=float, default=120.0,
                      help="upper bound in seconds for one batch: calls still out then are "
                           "cut off and the batch reported as partial (default 120)")
    setup = ap.add_argument_group("set-up")
    setup.add_argument("--latency-ms", type=float, default=50.0,
                       help="latency the Reach echo capability declares (default 50); Reach "
                            "derives its completion timeout from it (x1.2)")
    setup.add_argument("--celery-pool", choices=("solo", "threads", "prefork"), default="solo",
                       help="the Celery worker's pool (default solo: on 2 cores its p50 at 1 "
                            "in flight was the lowest, 2.4 ms against 2.8 for prefork -c 2 and "
                            "3.0 for threads -c 4, and at 64 in flight all three were within "
                            "noise, ~330-420 calls/s: the worker's ~1.2 ms of CPU per task is "
                            "the limit, not its pool)")
    setup.add_argument("--celery-concurrency", type=int, default=1,
                       help="the Celery pool's size (default 1; solo is always 1)")
    look = ap.add_argument_group("looking inside")
    look.add_argument("--verbose", "-v", action="store_true",
                      help="per-round numbers and coordinator stats (GC, commits, attempts)")
    look.add_argument("--profile", choices=("pyinstrument", "cprofile"), default=None,
                      help="after the run, profile the caller, coordinator and agent of each "
                           "Reach row during one extra batch (not counted); cprofile also "
                           "writes a .pstats file beside its text report")
    look.add_argument("--profile-dir", default=None, help="where profiles go (default .)")
    look.add_argument("--profile-inflight", type=int, default=HIGH, metavar="N",
                      help=f"calls in flight in the profiled batch (default {HIGH}; 1 shows "
                           f"the per-call path that sets p50)")
    look.add_argument("--log-dir", default=None,
                      help="keep each process's stderr here (default: a temp dir, removed)")
    # internal: how the children are started
    ap.add_argument("--role", choices=sorted(ROLES), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--eager", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--agents", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--schema", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--subject", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--responders", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--split", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("calls", "calls_1", "rounds", "warmup", "celery_concurrency", "batch_seconds"):
        value = getattr(args, name)
        if value is not None and (value < 0 if name == "warmup" else value <= 0):
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    if args.role is not None:
        try:
            asyncio.run(ROLES[args.role](args))
        except KeyboardInterrupt:
            pass
        return 0
    try:
        return asyncio.run(_cancel_on_sigterm(parent(args)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted; all benchmark processes stopped", file=sys.stderr)
        return 130
    except ChildFailed as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
