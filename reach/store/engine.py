"""The database under the store: the engine and its pragmas, and the group-commit writer.

Writes are group-committed: while one transaction is being written, new submissions gather, and
the next transaction takes all of them. A submit waits for its own commit (``insert``) — that is
the durability promise — but costs a fraction of a commit. Later state changes are written
behind (``update``); a crash can lose them, never the task itself, which is then resumed with
its key. Agents' registrations ride the same writer, in a transaction of their own.

SQLite files run in WAL mode with ``synchronous=NORMAL``: a commit survives the process being
killed (kill -9); ``synchronous="full"`` also survives power loss, at the cost of an fsync per
transaction. The store checkpoints the WAL itself, on a worker thread (``GroupCommit``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import Engine

from reach.core.tasks import Task
from reach.ports import DuplicateKey
from reach.store import postgres
from reach.store.connect import in_memory, make_engine
from reach.store.tables import Statements, commit_rows, compile_statements, create_tables

__all__ = ["Fenced", "GroupCommit", "in_memory", "make_engine"]

_Insert = tuple[Task, asyncio.Future[None]]


class Fenced(Exception):
    """This node may no longer accept tasks (its lease was lost): submit to another node."""


def _resolve(futures: Iterable[asyncio.Future[None]], exc: Exception | None) -> None:
    """Complete each future not yet done: with ``exc``, or with None when there is none."""
    for fut in futures:
        if fut.done():
            continue
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)


# ------------------------------------------------------------------ the writer


class GroupCommit:
    """Queues new tasks, task changes and agents' rows; one writer task commits them together.

    Where a transaction runs is the subclass's choice (``threaded``). SQLite is written from
    the event loop itself, one transaction per turn of the loop for all the submissions of that
    turn: with WAL and ``synchronous=NORMAL`` a commit is an append to the WAL file (no fsync),
    ~30 µs, cheaper than a hand-off to a thread and back (~90 µs and GIL ping-pong, measured).
    The one slow step, the checkpoint that fsyncs, runs on a worker thread with its own
    connection (``wal``). Servers (PostgreSQL) and ``synchronous="full"`` — where each commit
    waits on the network or the disk — run every call on one worker thread instead.
    """

    CHECKPOINT_EVERY = 256  # commits between WAL checkpoints

    def __init__(self, engine: Engine, *, threaded: bool, wal: bool, group_window: float,
                 update_delay: float, max_batch: int | None) -> None:
        self.engine = engine
        self.threaded = threaded
        self._checkpointer = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="reach-checkpoint") \
            if wal else None
        self._checkpointing: asyncio.Future[None] | None = None
        self._since_checkpoint = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reach-store") \
            if threaded else None
        self._raw: Any = None
        self._sql: Statements = {}
        self._inserts: list[_Insert] = []
        self._pending: dict[str, asyncio.Future[None]] = {}  # task id → its queued insert
        self._updates: dict[str, Task] = {}
        self._agent_rows: dict[str, dict[str, Any]] = {}  # agent id → row to upsert
        # agent id → its registrations' futures ("" for flush); resolved by the agents' commit
        self._agent_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._waiters: list[asyncio.Future[None]] = []  # resolved by the next commit
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0
        self.rows_written = 0
        self.group_window = group_window
        self.update_delay = update_delay
        # Most new tasks per transaction (None: every one queued). 1 is one commit per task,
        # the baseline bench/durable.py measures group commit against.
        self.max_batch = max_batch
        self._update_timer: asyncio.TimerHandle | None = None
        self._last_group = 0
        self._group_target = 0.0  # how many new tasks a gathering writer waits for
        self._filled: asyncio.Future[None] | None = None  # the writer waits for a full group
        # A cluster's node (Store's node_id and _commit_group): a change is written only
        # while the row is still its own; on_lost hears of the others.
        self.node_id: str | None = None
        self.on_lost: Callable[[list[str]], None] | None = None
        self.unique_keys = False  # the key index is there: a duplicate fails alone
        self.fenced: str | None = None  # why new tasks are refused (a lost lease), or None
        self._counts: dict[str, int] = {}  # rows each statement of a transaction touched

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._pool is None:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Create the tables if needed and start the writer."""
        await self._run(self._setup)
        self._writer = asyncio.get_running_loop().create_task(self._write_loop(),
                                                              name="reach-store-writer")

    def _setup(self) -> None:
        unique: list[bool] = []  # PostgreSQL: whether the key index is there
        create_tables(self.engine, (lambda conn: unique.append(postgres.create_key_index(conn)))
                      if self.engine.dialect.name == "postgresql" else None)
        self.unique_keys = any(unique)
        self._sql = compile_statements(self.engine)
        self._raw = self.engine.raw_connection()

    async def close(self) -> None:
        """Flush what is queued, then release the database."""
        self._closing = True
        if self._update_timer is not None:
            self._update_timer.cancel()
            self._update_timer = None
        if self._filled is not None:  # the writer is gathering a group: commit it now
            _resolve((self._filled,), None)
        self._wake.set()
        if self._writer is not None:
            await self._writer
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        await self._run(self._teardown)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._checkpointer is not None:
            self._checkpointer.shutdown(wait=True)

    def _teardown(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self.engine.dispose()

    # ------------------------------------------------------------ queueing

    def insert(self, task: Task) -> asyncio.Future[None]:
        """Queue a new task; the future completes once its row is committed (or at once
        fails with ``Fenced`` while the store is fenced, see ``Store.fence``)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fenced is not None:
            fut.set_exception(Fenced(f"not accepting tasks: {self.fenced}"))
            return fut
        self._inserts.append((task, fut))
        self._pending[task.task_id] = fut
        self._wake.set()
        if self._filled is not None and len(self._inserts) >= self._group_target:
            _resolve((self._filled,), None)
        return fut

    def update(self, task: Task) -> None:
        """Queue the task's current state to be written behind (latest state wins).

        Updates ride along with the next insert's commit; alone, they wait ``update_delay``
        so that one quiet caller does not pay two commits per task. A crash loses at most that
        much progress, which resumption redoes (the agent answers known keys from its cache)."""
        self._updates[task.task_id] = task
        if self._update_timer is None and not self._wake.is_set():
            self._update_timer = asyncio.get_running_loop().call_later(
                self.update_delay, self._wake.set)

    def persist(self, task: Task) -> asyncio.Future[None]:
        """Write the task's current state now; the future completes once it is committed.

        Used before a delivery leaves: which agent holds the key must be on disk first, so a
        restarted coordinator sends the task back to that agent and to no other."""
        queued = self._pending.get(task.task_id)
        if queued is not None:  # its insert row is built at commit time, from this state
            return queued
        self._updates[task.task_id] = task
        return self._waiter(self._waiters)

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        if self._inserts or self._updates:
            await self._waiter(self._waiters)
        if self._agent_rows:
            await self._waiter(self._agent_waiters.setdefault("", []))

    def _queue_agent(self, row: dict[str, Any]) -> asyncio.Future[None] | None:
        """Queue an agent's row for the agents' next transaction; its future completes once
        it is committed. None when the dialect has no upsert (write it with ``upsert_agent``)."""
        if self._writer is None or self._writer.done():
            raise RuntimeError("the store is not open (open() it first, or it was closed)")
        if "agent" not in self._sql:
            return None
        agent_id = row["agent_id"]
        self._agent_rows[agent_id] = row
        return self._waiter(self._agent_waiters.setdefault(agent_id, []))

    def _waiter(self, into: list[asyncio.Future[None]]) -> asyncio.Future[None]:
        """A future in ``into``, resolved by the commit that takes that list; wakes the writer."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        into.append(fut)
        self._wake.set()
        return fut

    # ------------------------------------------------------------ the writer task

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            if self._last_group > 1:
                await self._gather()
            self._wake.clear()
            if self._inserts or self._updates:
                await self._write_tasks()
            else:  # waiters with nothing of theirs to write
                waiters, self._waiters = self._waiters, []
                _resolve(waiters, None)
            if self._agent_rows:
                await self._write_agents()
            if self._closing and not (self._inserts or self._updates or self._agent_rows):
                return

    async def _gather(self) -> None:
        """Under load (the last group had company), let the group fill before committing:
        until as many new tasks wait as the recent groups held (the submitters they answered
        are back), or for at most ``group_window``. A fixed wait of the whole window made
        group commit slower than one commit per task at 16 in flight (bench/durable.py)."""
        if len(self._inserts) >= self._group_target or self._closing:
            return
        loop = asyncio.get_running_loop()
        filled = self._filled = loop.create_future()
        timer = loop.call_later(self.group_window, _resolve, (filled,), None)
        try:
            await filled
        finally:
            timer.cancel()
            self._filled = None

    async def _write_tasks(self) -> None:
        """One transaction for the queued new tasks and changes; then their futures learn."""
        inserts, updates, waiters = self._take()
        futures = [f for _, f in inserts] + waiters
        try:  # rows built here, on the loop: a worker thread never reads a task mid-change
            dupes, lost = await self._write_group(
                *commit_rows((t for t, _ in inserts), updates))
        except Exception as exc:  # the submitters learn their task was not stored
            _resolve(futures, exc)
            return
        self.commits += 1
        self.rows_written += len(inserts) + len(updates)
        self._maybe_checkpoint()
        if dupes:  # a key another node holds: that submit alone fails
            for task, fut in inserts:
                if task.task_id in dupes:
                    _resolve((fut,), dupes[task.task_id])
        _resolve(futures, None)
        if lost and self.on_lost is not None:
            self.on_lost(lost)

    async def _write_agents(self) -> None:
        """Registrations in a transaction of their own, after the tasks'. If it fails (another
        coordinator on the same database took a name), each row is tried alone, so only the
        clashing registration fails: not the submits, nor the other agents of the storm."""
        rows, self._agent_rows = self._agent_rows, {}
        waiters, self._agent_waiters = self._agent_waiters, {}
        errors: dict[str, Exception] = {}
        if await self._agents_transaction(list(rows.values())) is not None:
            for agent_id, row in rows.items():
                exc = await self._agents_transaction([row])
                if exc is not None:
                    errors[agent_id] = exc
        for agent_id, futures in waiters.items():
            _resolve(futures, errors.get(agent_id))

    async def _agents_transaction(self, rows: list[dict[str, Any]]) -> Exception | None:
        """Commit ``rows`` together; the database's error, if it refused them."""
        try:
            await self._write_agent_rows(rows)
        except Exception as exc:
            return exc
        self.commits += 1
        return None

    def _take(self) -> tuple[list[_Insert], dict[str, Task], list[asyncio.Future[None]]]:
        if self.max_batch is None or len(self._inserts) <= self.max_batch:
            inserts, self._inserts = self._inserts, []
            self._pending = {}
        else:  # the rest wait for the next transaction
            inserts, self._inserts = self._inserts[:self.max_batch], \
                self._inserts[self.max_batch:]
            for task, _ in inserts:
                del self._pending[task.task_id]
            self._wake.set()
        self._last_group = len(inserts)
        # The largest recent group, fading by a tenth per commit: a group that ended at the
        # window does not lower the bar for the next one (groups would shrink under a steady
        # trickle, and each commit costs the loop CPU), yet the bar follows the load down.
        self._group_target = max(float(len(inserts)), self._group_target * 0.9)
        updates, self._updates = self._updates, {}
        waiters, self._waiters = self._waiters, []
        if self._update_timer is not None:
            self._update_timer.cancel()
            self._update_timer = None
        return inserts, updates, waiters

    def _maybe_checkpoint(self) -> None:
        self._since_checkpoint += 1
        if (self._checkpointer is None or self._since_checkpoint < self.CHECKPOINT_EVERY
                or (self._checkpointing is not None and not self._checkpointing.done())):
            return
        self._since_checkpoint = 0
        self._checkpointing = asyncio.get_running_loop().run_in_executor(
            self._checkpointer, self._checkpoint)

    def _checkpoint(self) -> None:
        # PASSIVE never blocks the writer; it copies what it can and fsyncs the database file.
        raw = self.engine.raw_connection()
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            raw.close()

    # ------------------------------------------------------------ transactions (loop or worker)

    async def _write_group(self, new_rows: list[dict[str, Any]], changed: list[dict[str, Any]]
                           ) -> tuple[dict[str, DuplicateKey], list[str]]:
        """Commit a group where transactions run; (task id → the key's holder) for new rows
        another task's key kept out, and the changed tasks another node owns: none here
        (``Store`` overrides this for PostgreSQL's unique keys and a cluster's owners)."""
        await self._run(self._commit, new_rows, changed)
        return {}, []

    async def _write_agent_rows(self, rows: list[dict[str, Any]]) -> None:
        await self._run(self._commit_agents, rows)

    def _commit(self, new_rows: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
        update = "update" if self.node_id is None else "update_owned"
        self._transaction(("insert", new_rows), (update, changed))

    def _commit_agents(self, rows: list[dict[str, Any]]) -> None:
        self._transaction(("agent", rows))

    def _transaction(self, *steps: tuple[str, list[dict[str, Any]]]) -> None:
        # The DBAPI directly, with statements SQLAlchemy compiled once for this dialect: the
        # ORM path costs ~250 µs per commit, this one ~25 µs plus a few per row.
        raw = self._raw
        if raw is None:  # the last one was lost: the pool gives a fresh one
            raw = self._raw = self.engine.raw_connection()
        cur = raw.cursor()
        self._counts = counts = {}  # rows each statement touched (fencing reads it)
        try:
            for name, rows in steps:
                if rows:
                    sql, order = self._sql[name]
                    if order is None:
                        cur.executemany(sql, rows)
                    else:
                        # itemgetter: one C call per row instead of a generator step per
                        # column (28 Python steps per call of a task's two writes).
                        pick = itemgetter(*order)
                        cur.executemany(sql, list(map(pick, rows)) if len(order) > 1
                                        else [(pick(r),) for r in rows])
                    counts[name] = cur.rowcount
            raw.commit()
        except Exception:
            if getattr(raw.dbapi_connection, "closed", False):
                # The database went away under the writer's connection (a restart, a
                # partition): drop it, so that the next transaction, once the database
                # answers again, opens a new one instead of failing on this one forever.
                raw.invalidate()
                self._raw = None
            else:
                raw.rollback()
            raise
        finally:
            cur.close()
