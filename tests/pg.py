"""A real PostgreSQL for the tests: a fresh database per test session, dropped at its end.

The server is the one on loopback (``REACH_PG_URL``, default
``postgresql://postgres@127.0.0.1:5432/postgres``; .ci/run starts it). ``pg_url`` gives a test
the session's database with the store's tables emptied; ``store_url`` runs a test twice, on a
SQLite file and on PostgreSQL; ``open_store`` opens stores on ``pg_url`` (a cluster's nodes). Without a server (or without psycopg) the PostgreSQL tests
skip, saying why, except where ``REACH_REQUIRE_SERVICES`` is set (CI): there they fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ADMIN_URL = os.environ.get("REACH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TABLES = ("reach_tasks", "reach_agents", "reach_nodes", "reach_phrases", "reach_push_configs",
          "reach_values")


def _absent(why: str) -> None:
    message = (f"no PostgreSQL for the tests ({why}); start one on 127.0.0.1:5432 (user "
               f"postgres, trust) or set REACH_PG_URL")
    if os.environ.get("REACH_REQUIRE_SERVICES"):
        pytest.fail(f"{message} (CI sets REACH_REQUIRE_SERVICES: these tests must run)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The URL of a database made for this test session (``reach_test_<random>``)."""
    try:
        import psycopg
    except ImportError:
        _absent("psycopg is not installed: pip install 'agent-reach[postgres]'")
    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        _absent(str(exc).strip().splitlines()[0])
    name = f"reach_test_{os.urandom(4).hex()}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN_URL.rpartition("/")[0]
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The session's database, its store tables (where made) emptied for this test."""
    import psycopg
    with psycopg.connect(pg_database, autocommit=True) as conn:
        have = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        present = [t for t in TABLES if t in have]
        if present:
            conn.execute(f"TRUNCATE {', '.join(present)}")
    return pg_database


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL, once a SQLite file and once PostgreSQL (``pg_url``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def open_store(pg_url: str) -> AsyncIterator[Callable[..., Any]]:
    """``await open_store(node_id=...)``: a Store on the test's database, closed at the end."""
    from reach.store.store import Store

    stores: list[Store] = []

    async def make(**kw: Any) -> Store:
        store = Store(pg_url, **kw)
        await store.open()
        stores.append(store)
        return store
    yield make
    for store in stores:
        await store.close()
