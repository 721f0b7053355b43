#!/usr/bin/env python3
"""Which PostgreSQL driver for the store's group commit: psycopg 3 or asyncpg.

    python bench/pg_driver.py            # full run (about half a minute)
    python bench/pg_driver.py --quick    # a smoke run
    python bench/pg_driver.py --url postgresql://postgres@127.0.0.1/postgres

The rows are the store's own (``reach.store.tables.task_row`` of a fresh task, 200-byte
params), written to the store's own ``reach_tasks`` table in a scratch database that this run
creates and drops. Three drivers, each measured in this run:

- ``psycopg-thread``: psycopg 3 through SQLAlchemy's raw connection, each commit on one worker
  thread (``run_in_executor``), the statement SQLAlchemy compiled: what ``Store`` does.
- ``psycopg-async``: psycopg 3's native ``AsyncConnection``, ``executemany`` in a transaction
  on the event loop.
- ``asyncpg``: ``Connection.executemany`` in a transaction on the event loop.

Table 1 commits fixed batches of 1, 16 and 128 rows one after another (rows/s, commits/s, p50
of one commit as the event loop sees it). Table 2 is the store's case: 64 submitters, each
awaiting its own row's commit before it submits the next, through a group committer that takes
every queued row into the next transaction. Ratios are against ``psycopg-thread`` (the store as
it is). Table 3 is the ``Store`` itself, as it is, against the same store writing through
asyncpg on the loop (bench/pg_writer.py), several rounds alternating: the pick is made there.
Loopback only; the scratch database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg  # noqa: E402
import psycopg  # noqa: E402
from pg_writer import AsyncpgStore  # noqa: E402  (bench/, beside this file)
from sqlalchemy import create_engine  # noqa: E402

from reach.core.tasks import Envelope, new_task  # noqa: E402
from reach.store.store import Store  # noqa: E402
from reach.store.tables import TASKS, compile_statements, create_tables, task_row  # noqa: E402

PAYLOAD = {"data": "x" * 200}
COLUMNS = [c.name for c in TASKS.columns]
Commit = Callable[[list[dict[str, Any]]], Awaitable[None]]


def rows(n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        tid = os.urandom(16).hex()
        env = Envelope(task_id=tid, trace_id=os.urandom(16).hex(), capability="bench.echo",
                       params=PAYLOAD, caller="bench", idempotency_key=f"bench/{tid}",
                       created_at=time.time())
        out.append(task_row(new_task(env, env.created_at)))
    return out


# ------------------------------------------------------------------ the three drivers


class PsycopgThread:
    name = "psycopg-thread"

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        self.pool = ThreadPoolExecutor(max_workers=1)
        sql, order = compile_statements(self.engine)["insert"]
        self.sql, self.order = sql, order
        self.raw: Any = self.engine.raw_connection()

    def _commit(self, batch: list[dict[str, Any]]) -> None:
        cur = self.raw.cursor()
        try:
            params = batch if self.order is None else \
                [tuple(r[k] for k in self.order) for r in batch]
            cur.executemany(self.sql, params)
            self.raw.commit()
        finally:
            cur.close()

    async def commit(self, batch: list[dict[str, Any]]) -> None:
        await asyncio.get_running_loop().run_in_executor(self.pool, self._commit, batch)

    async def close(self) -> None:
        self.raw.close()
        self.engine.dispose()
        self.pool.shutdown()


class PsycopgAsync:
    name = "psycopg-async"
    sql = (f"INSERT INTO {TASKS.name} ({', '.join(COLUMNS)}) "
           f"VALUES ({', '.join('%(' + c + ')s' for c in COLUMNS)})")

    async def open(self, url: str) -> None:
        self.conn = await psycopg.AsyncConnection.connect(url)

    async def commit(self, batch: list[dict[str, Any]]) -> None:
        async with self.conn.transaction(), self.conn.cursor() as cur:
            await cur.executemany(self.sql, batch)

    async def close(self) -> None:
        await self.conn.close()


class Asyncpg:
    name = "asyncpg"
    sql = (f"INSERT INTO {TASKS.name} ({', '.join(COLUMNS)}) "
           f"VALUES ({', '.join(f'${i + 1}' for i in range(len(COLUMNS)))})")

    async def open(self, url: str) -> None:
        self.conn = await asyncpg.connect(url)

    async def commit(self, batch: list[dict[str, Any]]) -> None:
        async with self.conn.transaction():
            await self.conn.executemany(self.sql, [tuple(r[c] for c in COLUMNS) for r in batch])

    async def close(self) -> None:
        await self.conn.close()


# ------------------------------------------------------------------ the two measurements


async def fixed_batches(commit: Commit, size: int, total: int) -> tuple[float, float, float]:
    """Commit ``total`` rows in batches of ``size``: (rows/s, commits/s, p50 ms)."""
    batches = [rows(size) for _ in range(max(1, total // size))]
    times = []
    start = time.perf_counter()
    for batch in batches:
        t = time.perf_counter()
        await commit(batch)
        times.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    return len(batches) * size / wall, len(batches) / wall, statistics.median(times) * 1000


async def submitters(commit: Commit, concurrency: int, total: int
                     ) -> tuple[float, float, float]:
    """``concurrency`` submitters, each awaiting its row's commit, one group committer:
    (rows/s, commits/s, p50 ms from queueing a row to its commit)."""
    loop = asyncio.get_running_loop()
    queue: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
    wake = asyncio.Event()
    done = False
    commits = 0

    async def writer() -> None:
        nonlocal commits
        while not done or queue:
            await wake.wait()
            wake.clear()
            if not queue:
                continue
            taken = queue[:]
            del queue[:]
            await commit([r for r, _ in taken])
            commits += 1
            for _, fut in taken:
                fut.set_result(None)

    pool = rows(total)
    waits: list[float] = []

    async def submitter() -> None:
        while pool:
            row = pool.pop()
            fut = loop.create_future()
            t = time.perf_counter()
            queue.append((row, fut))
            wake.set()
            await fut
            waits.append(time.perf_counter() - t)

    task = loop.create_task(writer())
    start = time.perf_counter()
    await asyncio.gather(*(submitter() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    done = True
    wake.set()
    await task
    return total / wall, commits / wall, statistics.median(waits) * 1000


async def store_rate(db: str, writer: str, concurrency: int, total: int
                     ) -> tuple[float, float]:
    """``Store.insert`` awaited by ``concurrency`` submitters: (rows/s, commits/s), for the
    store as it is (``psycopg-thread``) or with its writes through asyncpg (``asyncpg``)."""
    store = Store(db) if writer == "psycopg-thread" else AsyncpgStore(db)
    await store.open()
    tasks = [new_task(Envelope(task_id=r["task_id"], trace_id=r["trace_id"],
                               capability="bench.echo", params=PAYLOAD, caller="bench",
                               idempotency_key=r["idempotency_key"]), time.time())
             for r in rows(total)]
    try:
        commits = store.commits
        start = time.perf_counter()

        async def submitter() -> None:
            while tasks:
                await store.insert(tasks.pop())
        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        return total / wall, (store.commits - commits) / wall
    finally:
        await store.close()


# ------------------------------------------------------------------ the run


async def main(url: str, quick: bool) -> None:
    base, _, _ = url.rpartition("/")
    scratch = f"reach_bench_{os.urandom(4).hex()}"
    admin = await asyncpg.connect(url)
    await admin.execute(f'CREATE DATABASE "{scratch}"')
    db = f"{base}/{scratch}"
    engine = create_engine(db.replace("postgresql://", "postgresql+psycopg://", 1))
    create_tables(engine)
    engine.dispose()
    total = 256 if quick else 2048
    try:
        psy_thread = PsycopgThread(db.replace("postgresql://", "postgresql+psycopg://", 1))
        psy_async, apg = PsycopgAsync(), Asyncpg()
        await psy_async.open(db)
        await apg.open(db)
        drivers: list[Any] = [psy_thread, psy_async, apg]
        clear = await asyncpg.connect(db)

        async def measure(run: Callable[[Commit], Awaitable[tuple[float, float, float]]]
                          ) -> list[tuple[float, float, float]]:
            out = []
            for d in drivers:
                await clear.execute(f"TRUNCATE {TASKS.name}")
                await run(d.commit)  # a warm-up pass: connections, prepared statements
                await clear.execute(f"TRUNCATE {TASKS.name}")
                out.append(await run(d.commit))
            return out

        print(f"PostgreSQL group commit, {total} task rows per case "
              f"(ratios: rows/s against psycopg-thread, the store as it is)")
        print("\n1. fixed batches, one commit after another")
        print(f"{'driver':<16} {'batch':>5} {'rows/s':>9} {'commits/s':>9} "
              f"{'p50 ms':>7} {'ratio':>6}")
        for size in (1, 16, 128):
            got = await measure(lambda c, s=size: fixed_batches(c, s, total))
            for d, (rps, cps, p50) in zip(drivers, got, strict=True):
                print(f"{d.name:<16} {size:>5} {rps:>9.0f} {cps:>9.0f} {p50:>7.3f} "
                      f"{rps / got[0][0]:>5.2f}x")
        print("\n2. 64 submitters, each awaiting its own commit (group commit)")
        print(f"{'driver':<16} {'conc':>5} {'rows/s':>9} {'commits/s':>9} "
              f"{'p50 ms':>7} {'ratio':>6}")
        got = await measure(lambda c: submitters(c, 64, total))
        for d, (rps, cps, p50) in zip(drivers, got, strict=True):
            print(f"{d.name:<16} {64:>5} {rps:>9.0f} {cps:>9.0f} {p50:>7.3f} "
                  f"{rps / got[0][0]:>5.2f}x")
        print("\n3. the Store itself: 64 submitters awaiting Store.insert (group commit; "
              "median of the rounds)")
        print(f"{'writer':<16} {'conc':>5} {'rows/s':>9} {'commits/s':>9} {'ratio':>6}")
        runs: dict[str, list[tuple[float, float]]] = {"psycopg-thread": [], "asyncpg": []}
        for _ in range(1 if quick else 3):  # alternating: the machine's load moves between
            for writer, got_runs in runs.items():
                await clear.execute(f"TRUNCATE {TASKS.name}")
                got_runs.append(await store_rate(db, writer, 64, total))
        medians = {w: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
                   for w, v in runs.items()}
        for writer, (rps, cps) in medians.items():
            print(f"{writer:<16} {64:>5} {rps:>9.0f} {cps:>9.0f} "
                  f"{rps / medians['psycopg-thread'][0]:>5.2f}x")
        await clear.close()
        for d in drivers:
            await d.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get(
        "REACH_PG_URL", "postgresql://postgres@127.0.0.1/postgres"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.quick))
