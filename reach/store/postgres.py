"""What is particular to a PostgreSQL store: the driver, a key committed by another node.

The driver is psycopg 3, through SQLAlchemy, each transaction on the store's worker thread
(bench/pg_driver.py measured it against psycopg's native async connection and asyncpg: a
commit is PostgreSQL's WAL flush, ~4 ms on this machine, and the drivers were within 1.35x of
each other; docs/cluster.md has the numbers). A plain ``postgresql://`` URL means psycopg 3.

Idempotency keys are unique in a PostgreSQL store (``KEY_INDEX``): a key runs once across
every coordinator on the database. When a group's transaction fails on that constraint, the
keys some other node committed first are read back, those submits fail alone with
``DuplicateKey`` (naming the first task), and the rest of the group is committed again.

A SQLite store has no such index: its one coordinator's memory answers a repeated key within
``idempotency_ttl``, and a key repeated after that is new work (the key expired). On
PostgreSQL the same holds: a submit refused on the index for a key whose task has ended and
was submitted more than ``idempotency_ttl`` ago takes the key over (``expire_keys``: the old
row keeps its task, under ``KEY~expired~TASK_ID``), in the same transaction's retry. A key
whose task is still unfinished is never given up, however old.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from reach.core.tasks import TERMINAL
from reach.ports import DuplicateKey
from reach.store.tables import TASKS

__all__ = ["INSTALL", "KEY_INDEX", "DuplicateKey", "StoreUnavailable", "create_key_index",
           "driver_url", "expire_keys", "held_keys", "is_postgres", "key_violation",
           "not_owned",
           "unreachable"]

log = logging.getLogger("reach.store")

INSTALL = "pip install 'agent-reach[postgres]'"
# Unique: a key runs once across the cluster. Made apart from the table (and not in its
# metadata: SQLite stores have no such index, see below) so that a database made before it
# gets it too, when its rows allow (``create_key_index``).
KEY_INDEX = "ux_reach_tasks_idempotency_key"


class StoreUnavailable(OSError):
    """The database could not be opened: the server could not be reached or refused the
    connection, or the database refused the store's schema (an ``OSError``, so ``reach
    serve`` says it in one line, as it does a taken port)."""


def unreachable(url: str, exc: BaseException) -> StoreUnavailable:
    """The error for a server store that cannot be opened: the URL without its password and
    the driver's first line."""
    from sqlalchemy.engine import make_url
    shown = make_url(url).render_as_string(hide_password=True)
    why = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
    return StoreUnavailable(f"cannot open store {shown}: {why}")


def is_postgres(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://``, ``postgresql+DRIVER://``,
    or the ``postgres://`` spelling)."""
    scheme = url.partition("://")[0].partition("+")[0]
    return scheme in ("postgresql", "postgres")


def driver_url(url: str) -> str:
    """The SQLAlchemy URL for ``url``: no driver named means psycopg 3. Raises ``ImportError``
    naming the extra to install when psycopg is missing."""
    scheme, sep, rest = url.partition("://")
    if "+" not in scheme:
        scheme = "postgresql+psycopg"
    if scheme == "postgresql+asyncpg":
        raise ValueError(f"store {url!r}: the store drives PostgreSQL with psycopg 3; "
                         f"use postgresql://... (asyncpg is not supported)")
    if scheme == "postgresql+psycopg":
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL store needs psycopg 3: {INSTALL}") from exc
    return f"{scheme}{sep}{rest}"


def create_key_index(conn: Connection) -> bool:
    """Create the unique key index where it is missing, in a savepoint of ``conn``'s
    transaction (``create_tables`` runs it under the schema's lock); a database whose rows
    already hold a key twice keeps working without it (with a warning). Whether the index is
    there."""
    try:
        with conn.begin_nested():
            conn.execute(text(f"CREATE UNIQUE INDEX IF NOT EXISTS {KEY_INDEX} ON "
                              f"{TASKS.name} (idempotency_key)"))
    except IntegrityError as exc:
        log.warning("reach_tasks holds some idempotency key twice, so keys are not unique "
                    "across coordinators on this database (%s)", exc.orig)
        return False
    return True


def held_keys(conn: Any, keys: list[str]) -> dict[str, str]:
    """Key → task id, for those of ``keys`` already committed (on a psycopg connection)."""
    cur = conn.cursor()
    try:
        cur.execute(f"SELECT idempotency_key, task_id FROM {TASKS.name} "
                    f"WHERE idempotency_key = ANY(%s)", (keys,))
        return {k: t for k, t in cur.fetchall()}
    finally:
        cur.close()


EXPIRED = "~expired~"  # an expired key's row keeps it as KEY~expired~TASK_ID


def expire_keys(conn: Any, keys: list[str], before: float) -> set[str]:
    """Of ``keys``, those whose task has ended and was submitted before ``before`` (the
    TTL's horizon, wall clock): their rows give the key up, committed at once. Returns them."""
    cur = conn.cursor()
    try:
        cur.execute(f"UPDATE {TASKS.name} SET idempotency_key = idempotency_key || %s || "
                    f"task_id WHERE idempotency_key = ANY(%s) AND created_at < %s AND "
                    f"state = ANY(%s) RETURNING idempotency_key",
                    (EXPIRED, keys, before, [s.value for s in TERMINAL]))
        gone = {k.rpartition(EXPIRED)[0] for (k,) in cur.fetchall()}
        conn.commit()
        return gone
    finally:
        cur.close()


def key_violation(exc: BaseException) -> bool:
    """Whether the database refused a row for the key index (not, say, a task id twice)."""
    diag = getattr(getattr(exc, "orig", exc), "diag", None)
    return getattr(diag, "constraint_name", None) == KEY_INDEX


def not_owned(conn: Any, task_ids: list[str], node_id: str) -> list[str]:
    """Those of ``task_ids`` whose row another node now owns (taken over from this one)."""
    cur = conn.cursor()
    try:
        cur.execute(f"SELECT task_id FROM {TASKS.name} WHERE task_id = ANY(%s) "
                    f"AND owner IS DISTINCT FROM %s", (task_ids, node_id))
        found = [t for (t,) in cur.fetchall()]
        conn.commit()
        return found
    finally:
        cur.close()
