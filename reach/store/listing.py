"""One caller's tasks, newest first, in pages: what A2A ``ListTasks`` reads (a2a_door).

The read walks the caller's own rows by ``CALLER_INDEX`` (caller, created_at, task_id), so
other callers' tasks cost nothing however many there are, and pages by a (created_at,
task_id) cursor, stable while tasks change state (a task's creation time never changes).
The cursor is the index's own order: an unfiltered page is an index range, unsorted.

Bounded: a page reads at most ``scan`` of the caller's rows past the cursor (and each of
its queries at most ``scan`` index entries). A filter that few of them match can leave a
page short, even empty, with a cursor to go on from (where the ``scan`` rows ended):
paging on still reaches every match. ``total`` is counted over the caller's newest
``scan`` rows: exact for a caller with fewer tasks, at most ``scan`` otherwise.

The index is made by ``create_caller_index`` when a door that lists is enabled (the A2A
door's startup), not with the tables: every insert maintains an index (about 3 µs a task,
+16 %, on a SQLite file: docs/a2a.md "ListTasks"), which a coordinator without A2A does
not pay. Once made it stays, and every later coordinator on that database keeps it up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, and_, func, select, text, tuple_
from sqlalchemy.engine import Engine

from reach.ports import TaskPage as Page
from reach.store.tables import SCHEMA_LOCK, TASKS, task_from_row

__all__ = ["CALLER_INDEX", "Page", "create_caller_index", "of_caller"]

CALLER_INDEX = "ix_reach_tasks_caller_created"
Cursor = tuple[float, str]  # (created_at, task_id) of the last task a page held


def create_caller_index(engine: Engine) -> None:
    """Make ``CALLER_INDEX`` where it is missing (on PostgreSQL under the schema's advisory
    lock, so nodes started together do not race to make it). On a large existing table this
    is one build, at that start; on PostgreSQL, writes to the table wait while it builds."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        conn.execute(text(f"CREATE INDEX IF NOT EXISTS {CALLER_INDEX} ON {TASKS.name} "
                          f"(caller, created_at, task_id)"))


def of_caller(engine: Engine, caller: str, limit: int, *, before: Cursor | None = None,
              trace_id: str | None = None, states: list[str] | None = None,
              updated_after: float | None = None, scan: int = 10_000) -> Page:
    """Up to ``limit`` of ``caller``'s tasks older than ``before``, newest first: of
    ``trace_id``, in ``states``, changed at or after ``updated_after`` when given."""
    scan = max(scan, limit + 1)
    c = TASKS.c
    newest_first = (c.created_at.desc(), c.task_id.desc())
    own: ColumnElement[bool] = c.caller == caller
    past = own if before is None else own & (tuple_(c.created_at, c.task_id) < tuple_(*before))
    filters: list[Callable[[Any], ColumnElement[bool]]] = []  # each on a row source's .c
    if trace_id is not None:
        filters.append(lambda t: t.trace_id == trace_id)
    if states:
        filters.append(lambda t: t.state.in_(states))
    if updated_after is not None:
        filters.append(lambda t: t.updated_at >= updated_after)
    with engine.connect() as conn:
        if filters:  # the filters read rows: within the next ``scan`` of the caller's
            window = select(TASKS).where(past).order_by(*newest_first).limit(scan).subquery()
            w = window.c
            rows = list(conn.execute(select(window).where(and_(*(f(w) for f in filters)))
                                     .order_by(w.created_at.desc(), w.task_id.desc())
                                     .limit(limit + 1)))
            counted = select(TASKS).where(own).order_by(*newest_first).limit(scan).subquery()
            total = conn.execute(select(func.count()).select_from(counted).where(
                and_(*(f(counted.c) for f in filters)))).scalar_one()
        else:  # the index alone orders them: read the page, count index entries
            rows = list(conn.execute(select(TASKS).where(past).order_by(*newest_first)
                                     .limit(limit + 1)))
            counted = select(c.created_at).where(own).limit(scan).subquery()
            total = conn.execute(select(func.count()).select_from(counted)).scalar_one()
        following: Cursor | None = None
        if len(rows) > limit:
            rows = rows[:limit]
            following = (rows[-1].created_at, rows[-1].task_id)
        elif filters:  # short: where the window ended, if the caller has rows past it
            edge = list(conn.execute(select(c.created_at, c.task_id).where(past)
                                     .order_by(*newest_first).offset(scan - 1).limit(2)))
            if len(edge) == 2:
                following = (edge[0].created_at, edge[0].task_id)
    return Page([task_from_row(r) for r in rows], int(total), following)
