#!/usr/bin/env python3
"""Durable task throughput: submits acknowledged after their commit, on a SQLite file.

    python bench/durable.py            # full run (about a minute)
    python bench/durable.py --quick    # a smoke run (a few seconds)

Two tables, each measured in this run:

1. **The store alone.** ``Store.insert`` futures awaited by ``C`` concurrent submitters, the
   way the gateway awaits them before acknowledging. *Group commit* is the store's default:
   one transaction takes every insert queued while the previous one was written. *One commit
   per task* is the same store with ``max_batch=1``. Both write the same rows with the same
   pragmas (WAL, ``synchronous=NORMAL``); the ``full`` rows also fsync every commit
   (``synchronous=FULL``: power-loss durable), where grouping matters most.
2. **End to end.** ``client.submit`` through a coordinator on a SQLite file to one echo agent,
   ``C`` submits in flight; a submit returns when the coordinator acknowledged it, which it
   does only after the task's row is committed. Everything runs in this one process, so the
   numbers include the client's and the agent's CPU too.

Ratios are group / per-task from the same run; the machine's noise moves absolute numbers,
not the shape. Loopback and a temporary directory only; everything stops by itself.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reach import Agent, Client, Reach  # noqa: E402
from reach.core.tasks import Envelope, new_task  # noqa: E402
from reach.store.store import Store  # noqa: E402

PAYLOAD = {"data": "x" * 200}


def _task(n: int) -> Any:
    tid = os.urandom(16).hex()
    env = Envelope(task_id=tid, trace_id=os.urandom(16).hex(), capability="bench.echo",
                   params=PAYLOAD, caller="bench", idempotency_key=tid, created_at=time.time())
    return new_task(env, env.created_at)


async def store_rate(path: str, *, concurrency: int, tasks: int, max_batch: int | None,
                     synchronous: str) -> float:
    """Inserts per second acknowledged after commit."""
    store = Store(f"sqlite:///{path}", synchronous, max_batch=max_batch)
    await store.open()
    try:
        todo = iter(range(tasks))

        async def submitter() -> None:
            for n in todo:
                await store.insert(_task(n))

        started = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        return tasks / (time.perf_counter() - started)
    finally:
        await store.close()


async def end_to_end_rate(path: str, *, concurrency: int, tasks: int,
                          max_batch: int | None) -> float:
    """``client.submit`` calls per second (each returns after the coordinator's commit)."""
    # A long queue wait: tasks may pile up behind the one agent; only acknowledgements count.
    reach = await Reach.start(store=f"sqlite:///{path}", queue_wait=60.0)
    if max_batch is not None:
        reach.store.max_batch = max_batch
    agent = Agent("bench-echo", max_concurrency=1000)

    @agent.capability("bench.echo", idempotent=True, latency_ms=10_000)  # queues build up
    async def echo(data: str) -> str:
        return data

    await agent.connect(reach.url)
    client = await Client.connect(reach.url, caller="bench")
    try:
        todo = iter(range(tasks))
        handles = []

        async def submitter() -> None:
            for _ in todo:
                handles.append(await client.submit("bench.echo", PAYLOAD))

        started = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        took = time.perf_counter() - started
        await asyncio.gather(*(h.result(timeout=60) for h in handles))  # all really ran
        return tasks / took
    finally:
        await client.close()
        await agent.close()
        await reach.stop()


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


async def main(args: argparse.Namespace) -> int:
    levels = [1, 16, 64] if args.quick else [1, 16, 64, 256]
    store_tasks = 300 if args.quick else 4000
    e2e_tasks = 200 if args.quick else 3000
    rounds = 1 if args.quick else args.rounds
    print(f"durable submits: SQLite file in a temp dir, {rounds} round(s), median; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cpu")
    with tempfile.TemporaryDirectory(prefix="reach-durable-") as tmp:
        counter = iter(range(10**6))

        def fresh() -> str:
            return os.path.join(tmp, f"db{next(counter)}.sqlite")

        widths = [26, 11, 13, 13, 9]
        print()
        print("1. the store alone: inserts/s acknowledged after commit")
        print(_row(["synchronous / in flight", "", "group", "per task", "ratio"], widths))
        print(_row(["-" * w for w in widths], widths))
        for sync in ("normal", "full"):
            for c in levels:
                group = statistics.median([await store_rate(
                    fresh(), concurrency=c, tasks=store_tasks, max_batch=None,
                    synchronous=sync) for _ in range(rounds)])
                single = statistics.median([await store_rate(
                    fresh(), concurrency=c, tasks=store_tasks if sync == "normal"
                    else store_tasks // 4, max_batch=1, synchronous=sync)
                    for _ in range(rounds)])
                print(_row([f"{sync} / {c}", "", f"{group:,.0f}", f"{single:,.0f}",
                            f"{group / single:.2f}x"], widths))
        print()
        print("2. end to end: client.submit/s, acknowledged after the coordinator's commit")
        print(_row(["in flight", "", "group", "per task", "ratio"], widths))
        print(_row(["-" * w for w in widths], widths))
        for c in levels:
            group = statistics.median([await end_to_end_rate(
                fresh(), concurrency=c, tasks=e2e_tasks, max_batch=None)
                for _ in range(rounds)])
            single = statistics.median([await end_to_end_rate(
                fresh(), concurrency=c, tasks=e2e_tasks, max_batch=1)
                for _ in range(rounds)])
            print(_row([str(c), "", f"{group:,.0f}", f"{single:,.0f}",
                        f"{group / single:.2f}x"], widths))
    print()
    print("group commit: one transaction takes every submit queued while the previous one "
          "was written;\nper task: the same store with max_batch=1 (one commit per task).")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Durable submits/s on a SQLite file: group commit against one commit per "
                    "task, for the store alone and end to end through a coordinator.")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per cell, the median is printed (default 3)")
    return parser


if __name__ == "__main__":
    sys.exit(asyncio.run(main(_parser().parse_args())))
