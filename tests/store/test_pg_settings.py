"""The store URL and cluster settings, the PostgreSQL driver's mapping and its absence, a
server that cannot be reached, and bench/pg_driver.py's smoke run."""

from __future__ import annotations

import builtins
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reach.config import Settings
from reach.store.postgres import StoreUnavailable, driver_url, is_postgres
from reach.store.store import Store

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgresql+psycopg://u@h/db",
                                 "postgres://u@h/db", "sqlite:///x.db", "sqlite://"])
def test_sqlite_and_postgresql_urls_are_stores(url: str) -> None:
    assert Settings(store=url).store == url


@pytest.mark.parametrize("url", ["mysql://u@h/db", "oracle://h", "reach.db"])
def test_other_urls_are_refused_naming_what_works(url: str) -> None:
    with pytest.raises(ValueError, match=r"not supported: use sqlite:///FILE\.db .*"
                                         r"postgresql://USER@HOST/DB"):
        Settings(store=url)


def test_a_cluster_needs_postgresql_and_gets_a_node_id() -> None:
    with pytest.raises(ValueError, match="a cluster needs a PostgreSQL store"):
        Settings(cluster=True)
    with pytest.raises(ValueError, match="a cluster needs a PostgreSQL store"):
        Settings(store="sqlite:///r.db", cluster=True)
    with pytest.raises(ValueError, match="shared secret"):  # the nodes could never link
        Settings(store="postgresql://u@h/db", cluster=True)
    a = Settings(store="postgresql://u@h/db", cluster=True, peer_token="s")
    b = Settings(store="postgresql://u@h/db", cluster=True, admin_token="s")
    assert a.node_id and b.node_id and a.node_id != b.node_id  # made, one per coordinator
    named = Settings(store="postgresql://u@h/db", cluster=True, node_id="east-1",
                     peer_token="s")
    assert named.node_id == "east-1" and named.lease_s == 5.0
    assert Settings().node_id is None and not Settings().cluster  # alone: no node


@pytest.mark.parametrize("bad", [{"lease_s": 0}, {"lease_s": -1.0}, {"lease_s": 1e9},
                                 {"node_id": ""}, {"node_id": "a b"}, {"node_id": "x" * 200}])
def test_lease_and_node_id_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="lease_s|node_id"):
        Settings(store="postgresql://u@h/db", cluster=True, **bad)


def test_a_plain_postgresql_url_means_psycopg_3() -> None:
    assert driver_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert driver_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert driver_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    with pytest.raises(ValueError, match="psycopg 3"):
        driver_url("postgresql+asyncpg://u@h/db")
    assert is_postgres("postgresql+psycopg2://h/d") and not is_postgres("sqlite://")
    # a URL that names another driver is SQLAlchemy's to load (psycopg 3 is not required)
    assert driver_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"


def test_without_psycopg_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_psycopg(name: str, *args: Any, **kw: Any) -> Any:
        if name == "psycopg":
            raise ImportError("No module named 'psycopg'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(ImportError, match=r"pip install 'agent-reach\[postgres\]'"):
        Store("postgresql://u@127.0.0.1/db")


async def test_a_server_that_refuses_is_one_line_without_the_password(pg_url: str) -> None:
    base = pg_url.rpartition("@")[2]
    store = Store(f"postgresql://nosuchrole:secret@{base}")
    with pytest.raises(StoreUnavailable) as refused:
        await store.open()
    message = str(refused.value)
    assert message.startswith("cannot open store postgresql://nosuchrole:***@")
    assert "secret" not in message and len(message.splitlines()) == 1
    await store.close()


def test_the_driver_bench_quick_prints_both_tables(pg_database: str) -> None:
    admin = pg_database.rpartition("/")[0] + "/postgres"
    proc = subprocess.run([sys.executable, "bench/pg_driver.py", "--quick", "--url", admin],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()]
    fixed = [r for r in rows if len(r) == 6 and r[1] in ("1", "16", "128")]
    assert {(r[0], r[1]) for r in fixed} == {
        (d, b) for d in ("psycopg-thread", "psycopg-async", "asyncpg")
        for b in ("1", "16", "128")}
    grouped = [r for r in rows if len(r) == 6 and r[1] == "64"]
    assert [r[0] for r in grouped] == ["psycopg-thread", "psycopg-async", "asyncpg"]
    assert all(r[-1].endswith("x") for r in fixed + grouped)
