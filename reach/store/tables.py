"""The store's tables (SQLModel), the statements written to them, and ``Task`` ↔ row.

Two tables: ``reach_agents`` (an agent's identity and last declaration; heartbeats stay in
memory) and ``reach_tasks`` (every task: envelope, state, result or error, attempts, history);
besides them ``reach_nodes`` (a cluster's nodes), ``reach_phrases`` (reach.store.phrases) and
``reach_push_configs`` (reach.store.pushes) and ``reach_values`` (reach.store.values).
Structured fields are stored as JSON text, so SQLite and PostgreSQL hold the same rows. The
writer's statements (task insert and update, agents' upsert) are compiled once per dialect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from pydantic_core import to_json
from sqlalchemy import Index, Table, bindparam, insert, inspect, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Field, SQLModel

from reach.core.chains import Link, steps_of
from reach.core.keys import revision as key_revision
from reach.core.tasks import TERMINAL, VALUE, Attempt, Envelope, Task, TaskState
from reach.store.phrases import PHRASES
from reach.store.pushes import PUSHES
from reach.store.values import VALUES


class AgentRow(SQLModel, table=True):
    """Static identity and declaration; heartbeats live in memory, never here."""

    __tablename__ = "reach_agents"
    agent_id: str = Field(primary_key=True)
    name: str = Field(index=True, unique=True)
    version: str = "0"
    capabilities: str = "[]"
    max_concurrency: int = 20
    first_seen: float = 0.0
    last_registered: float = 0.0


class TaskRow(SQLModel, table=True):
    """One task, whole: what ``task_from_row`` needs to resume it after a restart."""

    __tablename__ = "reach_tasks"
    task_id: str = Field(primary_key=True)
    trace_id: str = ""
    capability: str = ""
    caller: str = ""
    idempotency_key: str = ""
    priority: int = 5
    timeout: float | None = None
    max_retries: int = 2
    parent_task_id: str | None = None
    traceparent: str | None = None
    params: str = "{}"
    tags: str | None = None  # the submit's routing tags as JSON (added later: see create_tables)
    owner: str | None = None  # the node that drives it, in a cluster (added later); None: alone
    # Where its outcome goes besides its caller, as JSON (``Envelope.follow``: a webhook URL,
    # a chain's steps after it, its place in a chain); added later; None: nowhere else.
    follow: str | None = None
    state: str = Field(default="pending", index=True)
    result: str | None = None
    error: str | None = None
    attempts: str = "[]"
    history: str = "[]"
    created_at: float = Field(default=0.0, index=True)  # idempotency keys reload by age
    updated_at: float = 0.0


class NodeRow(SQLModel, table=True):
    """A coordinator of a cluster and its lease, in the database's clock (epoch seconds):
    the node owns its tasks while ``lease_until`` is ahead of the database's now."""

    __tablename__ = "reach_nodes"
    node_id: str = Field(primary_key=True)
    url: str = ""
    started_at: float = 0.0
    lease_until: float = Field(default=0.0, index=True)
    renewed_at: float = 0.0
    metrics: str | None = None  # the node's metrics (JSON), written with each renewal


TASKS: Table = TaskRow.__table__  # type: ignore[attr-defined]
AGENTS: Table = AgentRow.__table__  # type: ignore[attr-defined]
NODES: Table = NodeRow.__table__  # type: ignore[attr-defined]
# A trace's tasks are read back by trace id (a restart's recent traces, an old trace's
# waterfall). Made apart from the table so that a database from before it gets it too.
TRACE_INDEX = Index("ix_reach_tasks_trace_id", TASKS.c.trace_id)
# A node's unfinished tasks (its restart, a take-over) are read by owner, oldest first: on
# PostgreSQL a partial index holds just the unfinished rows. Not in the table's metadata:
# SQLite, with one coordinator and no owners, is not made to maintain it on every change.
OWNER_INDEX = "ix_reach_tasks_owner_unfinished"
# A dead node's chain steps that succeeded, whose next step it may not have started, are read
# by owner too (a survivor carries their chains on, reach.store.nodes): a partial index of the
# succeeded tasks with steps after them. ``follow`` never changes after the insert, and
# ``state`` is indexed already, so it costs no HOT update; a query names ``CHAINED`` verbatim
# (literals, not parameters) for the planner to match the predicate.
CHAIN_INDEX = "ix_reach_tasks_owner_chained"
CHAINED = "state = 'succeeded' AND follow LIKE '%\"then\"%'"
# One caller's tasks (A2A ListTasks) are read by reach.store.listing's CALLER_INDEX, made
# only when the A2A door starts: a coordinator that never lists does not maintain it.
_TERMINAL_SQL = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL))


ADDED_LATER = ("tags", "owner", "follow")  # nullable task columns an older version's database lacks
# The key of the PostgreSQL advisory lock the schema is made under ("reach" in ASCII): nodes
# of a cluster started together on a new database would otherwise race to create one table
# (CREATE TABLE's existence check is not atomic: the loser fails on pg_type's unique index).
SCHEMA_LOCK = 0x7265616368


def create_tables(engine: Engine, then: Callable[[Connection], None] | None = None) -> None:
    """Create the tables, and the trace index, where they do not exist yet; add the columns
    of ``ADDED_LATER`` to a task table made before them, and ``node`` to a push config table
    (each is nullable, so old rows read as before), then (PostgreSQL) the owner and chain
    indexes; then ``then(connection)``, in the same transaction (the key index,
    ``postgres.create_key_index``).

    One transaction; on PostgreSQL it first takes the advisory lock ``SCHEMA_LOCK``, held
    until it commits: of several coordinators opening one database at once, one makes the
    schema and the others, let in after its commit, find it made."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        SQLModel.metadata.create_all(conn, [TASKS, AGENTS, NODES, PHRASES, PUSHES, VALUES])
        TRACE_INDEX.create(conn, checkfirst=True)
        have = {c["name"] for c in inspect(conn).get_columns(TASKS.name)}
        for name in ADDED_LATER:
            if name not in have:
                conn.execute(text(f"ALTER TABLE {TASKS.name} ADD COLUMN {name} TEXT"))
        if "node" not in {c["name"] for c in inspect(conn).get_columns(PUSHES.name)}:
            # (a push table made before a cluster's nodes each sent their own configs)
            conn.execute(text(f"ALTER TABLE {PUSHES.name} ADD COLUMN node TEXT"))
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"CREATE INDEX IF NOT EXISTS {OWNER_INDEX} ON {TASKS.name} "
                              f"(owner, created_at) WHERE state NOT IN ({_TERMINAL_SQL})"))
            conn.execute(text(f"CREATE INDEX IF NOT EXISTS {CHAIN_INDEX} ON {TASKS.name} "
                              f"(owner, created_at) WHERE {CHAINED}"))
        if then is not None:
            then(conn)


# ------------------------------------------------------------------ statements

Statements = dict[str, tuple[str, tuple[str, ...] | None]]
"""Statement name → (SQL in the dialect's paramstyle, column order when it is positional)."""

_KEPT = ("agent_id", "first_seen")  # the agent columns a re-registration leaves as they are
TASK_UPDATE = (  # a task's later changes: the rows ``commit_rows`` builds for it
    update(TASKS)
    .where(TASKS.c.task_id == bindparam("k_task_id"))
    .values(state=bindparam("state"), result=bindparam("result"), error=bindparam("error"),
            attempts=bindparam("attempts"), history=bindparam("history"),
            updated_at=bindparam("updated_at"))
)
# A node of a cluster writes only the tasks it still owns (fencing: a task taken over by
# another node is not overwritten by the node that lost it).
TASK_UPDATE_OWNED = TASK_UPDATE.where(TASKS.c.owner == bindparam("k_owner"))


def agent_upsert(dialect: str) -> Any:
    """INSERT .. ON CONFLICT DO UPDATE for agents (SQLite, PostgreSQL); ``first_seen`` is
    kept from the first registration. None for a dialect without it."""
    dml: dict[str, Callable[[Any], Any]] = {"sqlite": sqlite.insert,
                                            "postgresql": postgresql.insert}
    if dialect not in dml:
        return None
    stmt = dml[dialect](AGENTS)
    return stmt.on_conflict_do_update(
        index_elements=[AGENTS.c.agent_id],
        set_={c.name: stmt.excluded[c.name] for c in AGENTS.columns if c.name not in _KEPT})


def upsert_agent(engine: Engine, row: dict[str, Any]) -> None:
    """One agent's row, for a database without INSERT .. ON CONFLICT: update, else insert."""
    changed = {k: v for k, v in row.items() if k not in _KEPT}
    with engine.begin() as conn:
        hit = conn.execute(update(AGENTS).where(AGENTS.c.agent_id == row["agent_id"])
                           .values(**changed))
        if hit.rowcount == 0:
            conn.execute(insert(AGENTS).values(**row))


def compile_statements(engine: Engine) -> Statements:
    """The writer's statements, compiled once for the engine's dialect: the new task's insert,
    the task change's update and, where the dialect has one, the agents' upsert."""
    dialect = engine.dialect
    statements: list[tuple[str, Any, list[str] | None]] = [
        # (owner only where a cluster can be: SQLite's rows are unowned, their NULL unbound)
        ("insert", insert(TASKS), [c.name for c in TASKS.columns
                                   if c.name != "owner" or dialect.name == "postgresql"]),
        ("update", TASK_UPDATE, None), ("update_owned", TASK_UPDATE_OWNED, None)]
    upsert = agent_upsert(dialect.name)
    if upsert is not None:
        statements.append(("agent", upsert, [c.name for c in AGENTS.columns]))
    compiled_all: Statements = {}
    for name, stmt, keys in statements:
        compiled = stmt.compile(dialect=dialect, column_keys=keys)
        order = compiled.positiontup
        compiled_all[name] = (str(compiled), tuple(order) if order else None)
    return compiled_all


# ------------------------------------------------------------------ rows


def dumps(value: Any) -> str:
    """JSON text of a stored field (pydantic-core's encoder: faster than ``json.dumps``)."""
    return to_json(value).decode()


def task_row(task: Task) -> dict[str, Any]:
    """Every column of a new task's row."""
    env = task.envelope
    return {
        "task_id": env.task_id, "trace_id": env.trace_id, "capability": env.capability,
        "caller": env.caller, "idempotency_key": env.idempotency_key,
        "priority": env.priority, "timeout": env.timeout, "max_retries": env.max_retries,
        "parent_task_id": env.parent_task_id, "traceparent": env.traceparent,
        "params": dumps(env.params), "created_at": env.created_at,
        "tags": dumps(env.tags) if env.tags else None, "owner": None,
        "follow": None if env.notify is None and not env.then and env.link is None
        else dumps(env.follow()),
        **task_changes(task),
    }


def task_changes(task: Task) -> dict[str, Any]:
    """The columns that change after a task is created (its state and what it gathered)."""
    return {
        "state": VALUE[task.state],
        "result": None if task.result is None else dumps(task.result),
        "error": None if task.error is None else dumps(task.error),
        "attempts": dumps([a.to_dict() for a in task.attempts]),
        "history": dumps(task.history),
        "updated_at": task.updated_at,
    }


def commit_rows(new: Iterable[Task], changed: dict[str, Task]
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One transaction's rows: every column of each new task, and ``TASK_UPDATE``'s parameters
    for each changed task (task id → task) not among the new ones (whose row, built now,
    already holds its latest state)."""
    new_rows = [task_row(t) for t in new]
    fresh = {r["task_id"] for r in new_rows}
    updates = [{"k_task_id": tid, **task_changes(t)} for tid, t in changed.items()
               if tid not in fresh]
    return new_rows, updates


def task_from_row(row: Any) -> Task:
    """Rebuild a live ``Task`` from a stored row."""
    env = Envelope(
        task_id=row.task_id, trace_id=row.trace_id, capability=row.capability,
        params=json.loads(row.params), caller=row.caller,
        idempotency_key=row.idempotency_key, priority=row.priority, timeout=row.timeout,
        max_retries=row.max_retries, created_at=row.created_at,
        parent_task_id=row.parent_task_id, traceparent=row.traceparent,
        tags=json.loads(row.tags) if getattr(row, "tags", None) else None,
    )
    if getattr(row, "follow", None):
        follow = json.loads(row.follow)
        env.notify, env.then = follow.get("notify"), steps_of(follow.get("then"))
        link = follow.get("chain")
        env.link = None if link is None else Link(link["head"], link["step"], link["of"])
    task = Task(envelope=env, state=TaskState(row.state), updated_at=row.updated_at)
    task.result = None if row.result is None else json.loads(row.result)
    task.error = None if row.error is None else json.loads(row.error)
    for a in json.loads(row.attempts):
        task.attempts.append(Attempt(
            number=a["number"], agent_id=a["agent_id"], agent=a["agent"],
            started_at=a["started_at"], ended_at=a.get("ended_at"),
            outcome=a.get("outcome", "lost"), error=a.get("error"),
            instance=a.get("instance"), timeout=a.get("timeout")))
    task.history = [(str(st), float(at), str(note)) for st, at, note in json.loads(row.history)]
    env.revision = key_revision(task.history)
    return task
