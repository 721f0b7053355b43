"""Nodes of a cluster started together on a new PostgreSQL database: every one starts, and the
schema is made once (under an advisory lock), not raced for (issue 25, item 13: one node
crashed on ``pg_type_typname_nsp_index``). A database that refuses the schema stops
``reach serve`` with one line, not the driver's traceback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack

import pytest
from pg import ADMIN_URL
from subprocs import REPO

from reach import Reach
from reach.store.store import Store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fresh_url(pg_database: str) -> Iterator[Iterator[str]]:
    """Fresh databases, none of the store's tables in them: ``next(fresh_url)`` makes one
    (all dropped at the end). ``pg_database`` is asked for its skip when there is no server."""
    import psycopg

    admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    made: list[str] = []
    base = ADMIN_URL.rpartition("/")[0]

    def make() -> Iterator[str]:
        while True:
            name = f"reach_fresh_{os.urandom(4).hex()}"
            admin.execute(f'CREATE DATABASE "{name}"')
            made.append(name)
            yield f"{base}/{name}"
    try:
        yield make()
    finally:
        for name in made:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _catalog(url: str) -> dict[str, int]:
    """How many of each of the store's tables and indexes the database holds."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT relname, count(*) FROM pg_class WHERE relname LIKE "
                            "'%reach_%' GROUP BY relname").fetchall()
    return {name: n for name, n in rows}


async def test_six_stores_opened_at_once_on_a_new_database_all_open(
        fresh_url: Iterator[str]) -> None:
    for _ in range(3):  # three new databases: the race lost on main every time in six
        url = next(fresh_url)
        stores = [Store(url, node_id=f"n{i}") for i in range(6)]
        opened = await asyncio.gather(*(s.open() for s in stores), return_exceptions=True)
        for store in stores:
            await store.close()
        assert opened == [None] * 6, [str(e).splitlines()[0] for e in opened if e]
        catalog = _catalog(url)
        for name in ("reach_tasks", "reach_agents", "reach_nodes",
                     "ux_reach_tasks_idempotency_key", "ix_reach_tasks_owner_unfinished"):
            assert catalog.get(name) == 1, catalog
        for store in stores:
            assert store.unique_keys  # the key index is there, for each of them


async def test_five_cluster_nodes_started_together_all_join(fresh_url: Iterator[str]) -> None:
    url = next(fresh_url)
    async with AsyncExitStack() as stack:
        openings = [Reach.start(store=url, cluster=True, node_id=f"node-{i}", lease_s=2.0,
                                admin_token="t", heartbeat_interval=0.05, http_port=None)
                    for i in range(5)]
        started = await asyncio.gather(*(o.__aenter__() for o in openings),
                                       return_exceptions=True)
        for opening, result in zip(openings, started, strict=True):
            if isinstance(result, Reach):
                stack.push_async_exit(opening)
        assert all(isinstance(r, Reach) for r in started), \
            [str(r).splitlines()[0] for r in started if not isinstance(r, Reach)]
        import psycopg

        with psycopg.connect(url) as conn:
            nodes = {n for (n,) in conn.execute("SELECT node_id FROM reach_nodes")}
        assert nodes == {f"node-{i}" for i in range(5)}


@pytest.mark.parametrize("table", ["reach_tasks", "reach_nodes"])
def test_reach_serve_on_a_database_that_refuses_the_schema_says_one_line(
        fresh_url: Iterator[str], table: str) -> None:
    """A table of the store's name that is not the store's: reach_tasks fails the schema at
    open, reach_nodes (not checked there) the node's join to the cluster."""
    import psycopg

    url = next(fresh_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (task_id text, node_id text)")
    run = subprocess.run(
        [sys.executable, "-m", "reach.cli", "serve", "--port", "0", "--no-http", "--cluster",
         "--peer-token", "s3cret", "--log-level", "WARNING", "--store", url],
        capture_output=True, text=True, timeout=60, cwd=REPO, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    assert run.returncode != 0
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "cannot open store" in lines[0] and url.rpartition("/")[2] in lines[0]
