"""The store: agents' identities and every task, in SQLModel tables (SQLite default, PostgreSQL).

``Store`` implements ``reach.ports.TaskStore``. Its writes are group-committed by the writer it
extends (``reach.store.engine.GroupCommit``: ``insert``, ``update``, ``persist``, ``flush``,
``open``, ``close``); the tables and the row ↔ ``Task`` conversion are in
``reach.store.tables``. This module picks where transactions run and answers the reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.exc import DBAPIError

from reach.core import chains
from reach.core.intent_learn import Phrase
from reach.core.tasks import TERMINAL, Task, TaskState
from reach.ports import DuplicateKey
from reach.store import listing, phrases, postgres, pushes, values
from reach.store.engine import Fenced, GroupCommit, in_memory, make_engine
from reach.store.lock import FileLock, sqlite_path
from reach.store.postgres import is_postgres, unreachable
from reach.store.tables import AGENTS, NODES, TASKS, dumps, task_from_row, upsert_agent

__all__ = ["Fenced", "Store"]


class Store(GroupCommit):
    """Tasks and agents' identities, durable: a submit returns once its row is committed.

    Where the transaction runs: SQLite with ``synchronous=NORMAL`` commits on the loop (an
    append to the WAL, cheaper than a thread hand-off) and checkpoints on a worker thread; a
    server (PostgreSQL) or ``synchronous="full"`` runs every call on one worker thread, so the
    event loop never waits on the network or the disk (``threaded`` overrides the choice).
    """

    def __init__(self, url: str = "sqlite://", synchronous: str = "normal",
                 threaded: bool | None = None, group_window: float = 0.001,
                 update_delay: float = 0.02, max_batch: int | None = None,
                 node_id: str | None = None,
                 on_lost: Callable[[list[str]], None] | None = None,
                 key_ttl: float | None = None, wall: Callable[[], float] = time.time) -> None:
        """``node_id`` makes this the store of one node of a cluster (PostgreSQL only): its
        new tasks are owned by it, ``unfinished`` answers only its own, and a change to a
        task another node took over is not written but reported to ``on_lost`` (task ids,
        called on the loop after the commit: the gateway drops them). ``key_ttl``: on
        PostgreSQL, a key whose task ended and was submitted that many seconds before
        ``wall()`` is given up to a new submit (``postgres.expire_keys``)."""
        self.url = url
        sqlite = url.startswith("sqlite")
        if node_id is not None and not is_postgres(url):
            raise ValueError(f"node_id needs a PostgreSQL store, not {url!r}")
        if threaded is None:
            threaded = not sqlite or synchronous.lower() in ("full", "extra")
        super().__init__(make_engine(url, synchronous), threaded=threaded,
                         wal=sqlite and not in_memory(url) and not threaded,
                         group_window=group_window, update_delay=update_delay,
                         max_batch=max_batch)
        self.node_id, self.on_lost = node_id, on_lost
        self.key_ttl, self.wall = key_ttl, wall
        path = sqlite_path(url)
        self._lock = FileLock(path) if path is not None else None

    async def open(self) -> None:
        """Take the SQLite file's lock (``StoreLocked`` if another coordinator has it), then
        create the tables if needed and start the writer. A database error on the way is a
        ``StoreUnavailable`` naming the URL (without its password) and the error's first
        line."""
        if self._lock is not None:
            self._lock.acquire()
        try:
            await super().open()
        except BaseException as exc:
            if self._lock is not None:
                self._lock.release()
            # The server is down or refused us, or the database refused the schema (a table
            # of that name that is not the store's, no right to create): one line, not the
            # driver's traceback (``reach serve`` prints an OSError as one line).
            if isinstance(exc, DBAPIError):
                raise unreachable(self.url, exc) from exc
            raise

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self._lock is not None:
                self._lock.release()

    # ------------------------------------------------------------ fencing

    def fence(self, reason: str) -> None:
        """Refuse new tasks from now on: each ``insert`` fails with ``Fenced`` (so nothing is
        acknowledged) until ``unfence``. ``Nodes.renew`` fences the store when the lease is
        lost: a survivor may be taking this node's tasks over."""
        self.fenced = reason

    def unfence(self) -> None:
        self.fenced = None

    # ------------------------------------------------------------ a cluster's node

    async def _write_group(self, new_rows: list[dict[str, Any]], changed: list[dict[str, Any]]
                           ) -> tuple[dict[str, DuplicateKey], list[str]]:
        if self.node_id is None and not self.unique_keys:  # alone: one transaction, as ever
            return await super()._write_group(new_rows, changed)
        result: tuple[dict[str, DuplicateKey], list[str]] = await self._run(
            self._commit_group, new_rows, changed)
        return result

    def _commit_group(self, new_rows: list[dict[str, Any]], changed: list[dict[str, Any]]
                      ) -> tuple[dict[str, DuplicateKey], list[str]]:
        """Commit a group (``_commit``, on the worker thread): with ``node_id``, new rows
        carry it as owner and changes are written ``WHERE owner = node_id``. Returns (task
        id → its key's first holder) for the new rows whose key another task holds — left
        out and the rest committed again — and the changed tasks another node now owns."""
        dupes: dict[str, DuplicateKey] = {}
        if self.node_id is not None:
            for row in new_rows:
                row["owner"] = self.node_id
            for row in changed:
                row["k_owner"] = self.node_id
        while True:
            try:
                self._commit(new_rows, changed)
                break
            except Exception as exc:
                if not (self.unique_keys and postgres.key_violation(exc)):
                    raise
                held = postgres.held_keys(self._raw, [r["idempotency_key"] for r in new_rows])
                self._raw.rollback()
                if not held:  # pragma: no cover — the holder's row is visible once it refuses
                    raise
                if self.key_ttl is not None:  # (expired keys go to the new submits)
                    gone = postgres.expire_keys(self._raw, list(held),
                                                self.wall() - self.key_ttl)
                    held = {k: t for k, t in held.items() if k not in gone}
                for row in new_rows:
                    if row["idempotency_key"] in held:
                        key = row["idempotency_key"]
                        dupes[row["task_id"]] = DuplicateKey(key, held[key])
                new_rows = [r for r in new_rows if r["idempotency_key"] not in held]
        lost: list[str] = []
        if self.node_id is not None and self._counts.get("update_owned", 0) < len(changed):
            lost = postgres.not_owned(self._raw, [r["k_task_id"] for r in changed],
                                      self.node_id)
        return dupes, lost

    # ------------------------------------------------------------ tasks

    async def get(self, task_id: str) -> Task | None:
        rows = await self._run(self._select, TASKS.c.task_id == task_id)
        return task_from_row(rows[0]) if rows else None

    async def amend(self, task: Task) -> None:
        """Write a dead letter's new params and timeout before its replay (reach.settling):
        the rest of a task's row changes behind, these only here."""
        env = task.envelope

        def q() -> None:
            with self.engine.begin() as conn:
                conn.execute(update(TASKS).where(TASKS.c.task_id == env.task_id)
                             .values(params=dumps(env.params), timeout=env.timeout))
        await self._run(q)

    async def unfinished(self) -> list[Task]:
        """Tasks not in a terminal state, oldest first: what a restart resumes (a cluster's
        node: only its own; a dead node's come to it by ``Nodes.take_over``)."""
        done = [s.value for s in TERMINAL]
        where: ColumnElement[bool] = TASKS.c.state.not_in(done)
        if self.node_id is not None:
            where = (TASKS.c.owner == self.node_id) & where
        rows = await self._run(self._select, where)
        return [task_from_row(r) for r in rows]

    async def chained(self, since: float) -> list[Task]:
        """Chain tasks (``follow`` names steps after them) that succeeded, created since
        ``since``, and whose history has no note of a next step (``chains.NEXT``) or of why
        none started (``chains.STOPPED``), oldest first: what a restart carries on
        (reach.gateway.chaining). A cluster's node: only its own."""
        where: ColumnElement[bool] = (TASKS.c.state == TaskState.SUCCEEDED.value) & \
            (TASKS.c.created_at >= since) & TASKS.c.follow.contains('"then"') & \
            ~TASKS.c.history.contains(chains.NEXT) & ~TASKS.c.history.contains(chains.STOPPED)
        if self.node_id is not None:
            where = (TASKS.c.owner == self.node_id) & where
        rows = await self._run(self._select, where)
        return [task_from_row(r) for r in rows]

    async def dead(self, limit: int = 10_000, since: float | None = None) -> list[Task]:
        """The newest ``limit`` dead letters (dead since ``since``), oldest first."""
        def q() -> list[Any]:
            where = TASKS.c.state == TaskState.DEAD.value
            if since is not None:
                where = where & (TASKS.c.updated_at >= since)
            with self.engine.connect() as conn:
                stmt = select(TASKS).where(where).order_by(TASKS.c.updated_at.desc())
                return list(conn.execute(stmt.limit(limit)))[::-1]
        rows: list[Any] = await self._run(q)
        return [task_from_row(r) for r in rows]

    async def trace_tasks(self, trace_ids: list[str]) -> list[Task]:
        """Every task of these traces, oldest first (by the trace index)."""
        if not trace_ids:
            return []
        rows = await self._run(self._select, TASKS.c.trace_id.in_(trace_ids))
        return [task_from_row(r) for r in rows]

    async def recent_traces(self, limit: int, scan: int = 5_000) -> list[Task]:
        """The tasks of the ``limit`` most recent traces, oldest first: what a restart puts
        back into the admin feed's trace list. Traces are found among the newest ``scan``
        tasks (by the creation index), then read whole."""
        def q() -> list[str]:
            with self.engine.connect() as conn:
                stmt = (select(TASKS.c.trace_id).order_by(TASKS.c.created_at.desc())
                        .limit(scan))
                newest: dict[str, None] = {}
                for (trace_id,) in conn.execute(stmt):
                    newest.setdefault(trace_id, None)
                    if len(newest) >= limit:
                        break
                return list(newest)
        if limit <= 0:
            return []
        trace_ids: list[str] = await self._run(q)
        return await self.trace_tasks(trace_ids)

    async def index_callers(self) -> None:
        """Make the index ``of_caller`` reads by, where missing (reach.store.listing: made
        by the A2A door's startup, so a coordinator that never lists pays nothing)."""
        await self._run(listing.create_caller_index, self.engine)

    async def of_caller(self, caller: str, limit: int, *,
                        before: tuple[float, str] | None = None, trace_id: str | None = None,
                        states: list[str] | None = None, updated_after: float | None = None,
                        scan: int = 10_000) -> listing.Page:
        """A page of the tasks ``caller`` submitted, newest first, by its own index: up to
        ``limit`` older than ``before`` (a (created_at, task_id) cursor), of ``trace_id``,
        in ``states`` and changed at or after ``updated_after`` when given; reading at most
        ``scan`` of the caller's rows (reach.store.listing)."""
        page: listing.Page = await self._run(
            partial(listing.of_caller, self.engine, caller, limit, before=before,
                    trace_id=trace_id, states=states, updated_after=updated_after, scan=scan))
        return page

    async def match(self, prefix: str, limit: int = 2) -> tuple[list[str], list[str]]:
        """Up to ``limit`` task ids and ``limit`` trace ids that start with ``prefix`` (by
        range over the primary key and the trace index, so any database's own index does)."""
        def q() -> tuple[list[str], list[str]]:
            top = prefix + "\U0010ffff"
            with self.engine.connect() as conn:
                tasks = conn.execute(select(TASKS.c.task_id).where(
                    (TASKS.c.task_id >= prefix) & (TASKS.c.task_id < top)).limit(limit))
                found = [t for (t,) in tasks]
                trace_ids = conn.execute(select(TASKS.c.trace_id).distinct().where(
                    (TASKS.c.trace_id >= prefix) & (TASKS.c.trace_id < top)).limit(limit))
                return found, [t for (t,) in trace_ids]
        result: tuple[list[str], list[str]] = await self._run(q)
        return result

    async def keys_since(self, since: float, limit: int | None = None
                         ) -> list[tuple[str, str, float]]:
        """(idempotency key, task id, created) of tasks created after ``since``, oldest first;
        with ``limit``, only the newest that many."""
        def q() -> list[tuple[str, str, float]]:
            with self.engine.connect() as conn:
                stmt = (select(TASKS.c.idempotency_key, TASKS.c.task_id, TASKS.c.created_at)
                        .where(TASKS.c.created_at >= since)
                        .order_by(TASKS.c.created_at.desc()))
                if limit is not None:
                    stmt = stmt.limit(limit)
                return [(k, t, c) for k, t, c in conn.execute(stmt)][::-1]
        result: list[tuple[str, str, float]] = await self._run(q)
        return result

    def _select(self, where: ColumnElement[bool]) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(TASKS).where(where).order_by(TASKS.c.created_at)))

    # ------------------------------------------------------------ agents' identities

    async def agent_ids(self) -> dict[str, str]:
        """Agent name → its stable id (re-registering under a name keeps its id)."""
        def q() -> dict[str, str]:
            with self.engine.connect() as conn:
                return {n: i for i, n in conn.execute(select(AGENTS.c.agent_id,
                                                            AGENTS.c.name))}
        result: dict[str, str] = await self._run(q)
        return result

    async def declared(self) -> dict[str, list[str]]:
        """agent name → the capability names it declared when it last registered."""
        def q() -> dict[str, list[str]]:
            with self.engine.connect() as conn:
                rows = conn.execute(select(AGENTS.c.name, AGENTS.c.capabilities))
                return {n: [str(c.get("name", "")) for c in json.loads(caps)]
                        for n, caps in rows}
        result: dict[str, list[str]] = await self._run(q)
        return result

    # ------------------------------------------------------------ learned phrases

    async def phrases(self) -> list[Phrase]:
        """The phrases intent routing learned, oldest first (reach.store.phrases)."""
        found: list[Phrase] = await self._run(phrases.load, self.engine)
        return found

    async def keep_phrase(self, phrase: Phrase) -> None:
        await self._run(phrases.keep, self.engine, phrase)

    async def forget_phrase(self, text: str) -> bool:
        gone: bool = await self._run(phrases.forget, self.engine, text)
        return gone

    # ------------------------------------------------------------ push notification configs

    async def push_configs(self, limit: int, *, dead_only: bool = False,
                           everywhere: bool = False) -> list[pushes.Kept]:
        """The oldest ``limit`` push configs this node sends (``everywhere``: every node's),
        dead letters included (``dead_only``: those only), oldest first (reach.store.pushes)."""
        found: list[pushes.Kept] = await self._run(pushes.load, self.engine, limit, self.node_id,
                                                   dead_only, everywhere)
        return found

    async def task_push_configs(self, task_id: str, limit: int) -> list[pushes.Kept]:
        """The task's push configs not sent yet, whichever node sends them."""
        found: list[pushes.Kept] = await self._run(pushes.of_task, self.engine, task_id, limit)
        return found

    async def keep_push_config(self, task_id: str, config_id: str, body: str, now: float
                               ) -> None:
        await self._run(pushes.keep, self.engine, task_id, config_id, body, now, self.node_id)

    async def forget_push_config(self, task_id: str, config_id: str) -> None:
        await self._run(pushes.forget, self.engine, task_id, config_id)

    async def push_dead(self, task_id: str, config_id: str, reason: str, now: float) -> None:
        """Keep a push config whose notification was not delivered, as a dead letter."""
        await self._run(pushes.mark_dead, self.engine, task_id, config_id, reason, now,
                        self.node_id)

    async def push_pending_here(self, task_id: str, config_id: str) -> bool:
        """Whether this node still sends the config (not deleted, dead, or taken over)."""
        mine: bool = await self._run(pushes.pending_here, self.engine, task_id, config_id,
                                     self.node_id)
        return mine

    async def claim_push_dead(self, task_id: str, config_id: str | None = None
                              ) -> list[pushes.Kept]:
        """The task's dead push letters (of any node), made pending here to be replayed."""
        found: list[pushes.Kept] = await self._run(pushes.claim_dead, self.engine, task_id,
                                                   config_id, self.node_id)
        return found

    async def adopt_pushes(self, limit: int) -> list[pushes.Kept]:
        """The push configs of dead nodes, moved to this node (a cluster's take-over)."""
        if self.node_id is None:
            return []
        found: list[pushes.Kept] = await self._run(pushes.adopt, self.engine, self.node_id,
                                                   limit, NODES.name)
        return found

    async def kept_value(self, name: str, made: str) -> str:
        """The value kept under ``name``, ``made`` kept when none is (reach.store.values)."""
        value: str = await self._run(values.kept, self.engine, name, made)
        return value

    async def save_agent(self, agent_id: str, name: str, version: str, capabilities: list[Any],
                         max_concurrency: int, now: float) -> None:
        """Record an agent's identity and declaration; returns once it is committed.

        Registrations share the group commit with tasks: a reconnect storm after a restart
        (thousands of agents at once) costs a few transactions, not one each."""
        row = {"agent_id": agent_id, "name": name, "version": version,
               "capabilities": dumps(capabilities), "max_concurrency": max_concurrency,
               "first_seen": now, "last_registered": now}
        queued = self._queue_agent(row)
        if queued is not None:
            await queued
        else:  # a database without INSERT .. ON CONFLICT: one at a time
            await self._run(upsert_agent, self.engine, row)
