"""The engine under the store: SQLite's pragmas and in-memory pool, PostgreSQL's driver."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import StaticPool
from sqlmodel import create_engine

from reach.store.postgres import driver_url, is_postgres


def in_memory(url: str) -> bool:
    """Is ``url`` an in-memory SQLite database (one shared connection, no WAL)?"""
    return url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url


# A C callable that answers None whatever it is given (a dict's ``get`` of an empty dict).
_NOTHING: dict[object, None] = {}
_AS_NULL = _NOTHING.get


def bind_none_directly() -> None:
    """Let sqlite3 bind None as NULL without a search for an adapter first.

    sqlite3 binds an exact int, float or str as it is, but anything else (None included) goes
    through its adapters: not finding one, it looks up ``__adapt__`` and ``__conform__``,
    each raising and clearing an AttributeError, about 250 ns a None. A task's row binds
    several Nones on every write (no result yet, no tags, no parent), so the adapter for
    None, to None, is found at once. sqlite3's adapters are the module's, shared by the
    process: this one changes nothing another user of sqlite3 would see."""
    sqlite3.register_adapter(type(None), _AS_NULL)


def make_engine(url: str, synchronous: str = "normal") -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and a shared in-memory pool;
    PostgreSQL gets psycopg 3 unless the URL names another driver."""
    if is_postgres(url):
        return create_engine(driver_url(url), pool_pre_ping=True)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    memory = in_memory(url)
    bind_none_directly()
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if memory:
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous.upper()}")
            # The store checkpoints from its own thread (GroupCommit._checkpoint): an automatic
            # checkpoint would fsync inside a commit, on the event loop.
            cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.execute("PRAGMA busy_timeout=5000")
        cur.close()

    return engine
