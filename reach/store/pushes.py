"""Push notification configs kept (``reach_push_configs``): where to send a task's outcome when
it ends (the A2A door's ``Pusher``), so a restart forgets none of an unfinished task's.

One row per (task, config id); the config itself is the door's JSON, opaque here. A row is
written before the config is acknowledged and deleted once its notification was delivered,
or the config deleted. A notification that could not be delivered keeps its row, marked
``dead`` with the reason: a dead letter that a restart keeps and an operator can replay
(``reach pushes --replay``). Bounded: ``load`` reads at most the door's own bound on configs
(``limit``), the oldest first.

In a cluster (docs/cluster.md) each row names the node that sends it (``node``; NULL on a lone
coordinator): the node the config was made on, until it dies. A node sends only a row that
names it and is not dead (``pending_here``, checked just before each delivery), so a node cut
off from the cluster does not send what a survivor took over. ``adopt`` moves the rows of
nodes whose lease ran out to a survivor, with the dead node's tasks (``SKIP LOCKED``, as the
tasks' take-over); ``claim_dead`` makes a dead letter, of any node, pending at the node that
replays it, once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Table, delete, insert, select, text, update
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel


class PushRow(SQLModel, table=True):
    __tablename__ = "reach_push_configs"
    task_id: str = Field(primary_key=True)
    config_id: str = Field(primary_key=True)
    body: str = "{}"
    created_at: float = Field(default=0.0, index=True)
    dead: str | None = None  # why its notification was not delivered (None: not yet sent)
    dead_at: float = 0.0
    node: str | None = None  # the cluster node that sends it (None: a lone coordinator)


PUSHES: Table = PushRow.__table__  # type: ignore[attr-defined]


def _one(task_id: str, config_id: str) -> Any:
    """The row of one config."""
    return (PUSHES.c.task_id == task_id) & (PUSHES.c.config_id == config_id)


def _here(node: str | None) -> Any:
    """The rows ``node`` sends (a lone coordinator's: NULL)."""
    return PUSHES.c.node.is_(None) if node is None else PUSHES.c.node == node


class Kept(NamedTuple):
    """One kept config: its task, its JSON, and, for a dead letter, why and when."""

    task_id: str
    body: str
    dead: str | None
    dead_at: float
    node: str | None = None


def _kept(rows: Any) -> list[Kept]:
    return [Kept(task_id, body, dead, dead_at or 0.0, node)
            for task_id, body, dead, dead_at, node in rows]


def load(engine: Engine, limit: int, node: str | None = None, dead_only: bool = False,
         everywhere: bool = False) -> list[Kept]:
    """The oldest ``limit`` configs ``node`` sends (``everywhere``: every node's), dead
    letters included (``dead_only``: those only), oldest first."""
    c = PUSHES.c
    query = select(c.task_id, c.body, c.dead, c.dead_at, c.node)
    if not everywhere:
        query = query.where(_here(node))
    if dead_only:
        query = query.where(c.dead.is_not(None))
    with engine.connect() as conn:
        return _kept(conn.execute(query.order_by(c.created_at, c.task_id).limit(limit)))


def of_task(engine: Engine, task_id: str, limit: int) -> list[Kept]:
    """The task's configs not sent yet, whichever node sends them, oldest first."""
    c = PUSHES.c
    with engine.connect() as conn:
        return _kept(conn.execute(
            select(c.task_id, c.body, c.dead, c.dead_at, c.node)
            .where((c.task_id == task_id) & c.dead.is_(None))
            .order_by(c.created_at, c.config_id).limit(limit)))


def keep(engine: Engine, task_id: str, config_id: str, body: str, now: float,
         node: str | None = None) -> None:
    """Write one config, sent by ``node`` (replacing the row of the same task and id)."""
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))
        conn.execute(insert(PUSHES).values(task_id=task_id, config_id=config_id, body=body,
                                           created_at=now, node=node))


def forget(engine: Engine, task_id: str, config_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))


def mark_dead(engine: Engine, task_id: str, config_id: str, reason: str, now: float,
              node: str | None = None) -> None:
    """Mark one config's notification undelivered (a dead letter) with ``reason``, if
    ``node`` still sends it."""
    with engine.begin() as conn:
        conn.execute(update(PUSHES).where(_one(task_id, config_id) & _here(node))
                     .values(dead=reason[:1000], dead_at=now))


def pending_here(engine: Engine, task_id: str, config_id: str, node: str | None) -> bool:
    """Whether the config is still kept, not dead, and sent by ``node``: what a delivery
    checks first (deleted meanwhile, or taken over by another node: not sent here)."""
    with engine.connect() as conn:
        return conn.execute(select(PUSHES.c.task_id).where(
            _one(task_id, config_id) & _here(node) & PUSHES.c.dead.is_(None))).first() is not None


def claim_dead(engine: Engine, task_id: str, config_id: str | None, node: str | None
               ) -> list[Kept]:
    """Make the task's dead letters (``config_id``'s only, when given), whichever node holds
    them, pending at ``node``, which replays them: the rows claimed. Two nodes replaying one
    letter: one claims it, the other gets nothing."""
    where = (PUSHES.c.task_id == task_id) & PUSHES.c.dead.is_not(None)
    if config_id is not None:
        where = where & (PUSHES.c.config_id == config_id)
    c = PUSHES.c
    with engine.begin() as conn:
        return _kept(conn.execute(update(PUSHES).where(where).values(node=node, dead=None)
                                  .returning(c.task_id, c.body, c.dead, c.dead_at, c.node)))


_NOW = "extract(epoch from clock_timestamp())"  # the database's time, as reach.store.nodes


def adopt(engine: Engine, me: str, limit: int, nodes: str) -> list[Kept]:
    """Move up to ``limit`` rows of nodes whose lease ran out (in the table ``nodes``,
    reach.store.nodes) to ``me`` (PostgreSQL), the oldest first, and return them: nothing
    once ``me`` holds no live lease (a fenced node takes nothing); rows another survivor is
    moving are skipped (``SKIP LOCKED``)."""

    def live(node: str) -> str:
        return f"SELECT 1 FROM {nodes} n WHERE n.node_id = {node} AND n.lease_until > {_NOW}"
    sql = (f"UPDATE {PUSHES.name} SET node = :me WHERE (task_id, config_id) IN ("
           f"SELECT task_id, config_id FROM {PUSHES.name} p WHERE p.node IS NOT NULL AND "
           f"p.node <> :me AND NOT EXISTS ({live('p.node')}) AND EXISTS ({live(':me')}) "
           f"ORDER BY created_at LIMIT :n FOR UPDATE SKIP LOCKED) "
           f"RETURNING task_id, body, dead, dead_at, node")
    with engine.begin() as conn:
        return _kept(conn.execute(text(sql), {"me": me, "n": limit}))
