"""The candidate the store did not pick: its group commit's writes through asyncpg.

bench/pg_driver.py's table 3 runs it against the ``Store`` as it is (psycopg 3 through
SQLAlchemy, each transaction on the store's worker thread): ``AsyncpgStore`` is that same
store with the writes a submit waits for (new tasks, their changes, agents' rows) on one
asyncpg connection on the event loop, duplicates and fencing included, everything else
unchanged. The driver alone was faster (tables 1 and 2); inside the store it was not, because
the encoding then runs on the loop, which is the coordinator's busiest thread, while libpq
does the same work on the worker thread with the GIL released (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

from reach.ports import DuplicateKey
from reach.store.postgres import INSTALL, KEY_INDEX
from reach.store.store import Store
from reach.store.tables import AGENTS, TASKS

_TASK_COLUMNS = [c.name for c in TASKS.columns]
_AGENT_COLUMNS = [c.name for c in AGENTS.columns]
_CHANGES = ["state", "result", "error", "attempts", "history", "updated_at"]
_KEPT = ("agent_id", "first_seen")  # as tables.agent_upsert: a re-registration keeps them


def _values(n: int) -> str:
    return ", ".join(f"${i + 1}" for i in range(n))


INSERT = (f"INSERT INTO {TASKS.name} ({', '.join(_TASK_COLUMNS)}) "
          f"VALUES ({_values(len(_TASK_COLUMNS))})")
UPDATE = (f"UPDATE {TASKS.name} SET "
          + ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(_CHANGES))
          + " WHERE task_id = $1")
UPDATE_OWNED = UPDATE + f" AND owner = ${len(_CHANGES) + 2}"
UPSERT = (f"INSERT INTO {AGENTS.name} ({', '.join(_AGENT_COLUMNS)}) "
          f"VALUES ({_values(len(_AGENT_COLUMNS))}) ON CONFLICT (agent_id) DO UPDATE SET "
          + ", ".join(f"{c} = EXCLUDED.{c}" for c in _AGENT_COLUMNS if c not in _KEPT))
HELD = (f"SELECT idempotency_key, task_id FROM {TASKS.name} "
        f"WHERE idempotency_key = ANY($1::text[])")
NOT_OWNED = (f"SELECT task_id FROM {TASKS.name} WHERE task_id = ANY($1::text[]) "
             f"AND owner IS DISTINCT FROM $2")


def asyncpg_dsn(url: str) -> str:
    """The libpq-style DSN asyncpg takes for a store URL (its driver name dropped)."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql{sep}{rest}"


class PgWriter:
    """One asyncpg connection for the writer task's transactions (never two at once: the
    writer commits one group after another)."""

    def __init__(self, conn: Any, node_id: str | None) -> None:
        self.conn = conn
        self.node_id = node_id
        self.unique_keys = True

    @classmethod
    async def connect(cls, url: str, node_id: str | None) -> PgWriter:
        try:
            import asyncpg
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL store needs asyncpg: {INSTALL}") from exc
        return cls(await asyncpg.connect(asyncpg_dsn(url)), node_id)

    async def close(self) -> None:
        await self.conn.close()

    async def commit_group(self, new_rows: list[dict[str, Any]],
                           changed: list[dict[str, Any]]
                           ) -> tuple[dict[str, DuplicateKey], list[str]]:
        """As ``GroupCommit._commit_group``: one transaction for the group; the new rows
        whose key another task holds are left out (their ``DuplicateKey``) and the rest
        committed again; the changed tasks another node now owns are not written."""
        import asyncpg

        dupes: dict[str, DuplicateKey] = {}
        while True:
            try:
                return dupes, await self._transaction(new_rows, changed)
            except asyncpg.UniqueViolationError as exc:
                if not self.unique_keys or exc.constraint_name != KEY_INDEX:
                    raise
                held = {k: t for k, t in await self.conn.fetch(
                    HELD, [r["idempotency_key"] for r in new_rows])}
                if not held:  # pragma: no cover — the holder's row is visible once it refuses
                    raise
                for row in new_rows:
                    key = row["idempotency_key"]
                    if key in held:
                        dupes[row["task_id"]] = DuplicateKey(key, held[key])
                new_rows = [r for r in new_rows if r["idempotency_key"] not in held]

    async def _transaction(self, new_rows: list[dict[str, Any]],
                           changed: list[dict[str, Any]]) -> list[str]:
        me = self.node_id
        async with self.conn.transaction():
            if new_rows:
                await self.conn.executemany(INSERT, [
                    tuple(me if c == "owner" else r[c] for c in _TASK_COLUMNS)
                    for r in new_rows])
            if not changed:
                return []
            if me is None:
                await self.conn.executemany(UPDATE, [
                    (r["k_task_id"], *(r[c] for c in _CHANGES)) for r in changed])
                return []
            await self.conn.executemany(UPDATE_OWNED, [
                (r["k_task_id"], *(r[c] for c in _CHANGES), me) for r in changed])
            # (asyncpg's executemany tells no row counts: ask, before the commit)
            lost = await self.conn.fetch(NOT_OWNED, [r["k_task_id"] for r in changed], me)
            return [r[0] for r in lost]

    async def commit_agents(self, rows: list[dict[str, Any]]) -> None:
        """Agents' rows in one transaction (the upsert keeps ``agent_id`` and ``first_seen``)."""
        async with self.conn.transaction():
            await self.conn.executemany(UPSERT, [tuple(r[c] for c in _AGENT_COLUMNS)
                                                 for r in rows])


class AsyncpgStore(Store):
    """``Store`` whose group commit writes through ``PgWriter`` (PostgreSQL only)."""

    _pg: PgWriter | None = None

    async def open(self) -> None:
        self._pg = await PgWriter.connect(self.url, self.node_id)
        await super().open()
        self._pg.unique_keys = self.unique_keys

    async def close(self) -> None:
        await super().close()
        if self._pg is not None:
            await self._pg.close()

    async def _write_group(self, new_rows: list[dict[str, Any]], changed: list[dict[str, Any]]
                           ) -> tuple[dict[str, DuplicateKey], list[str]]:
        assert self._pg is not None
        return await self._pg.commit_group(new_rows, changed)

    async def _write_agent_rows(self, rows: list[dict[str, Any]]) -> None:
        assert self._pg is not None
        await self._pg.commit_agents(rows)
