"""Push notification configs kept (``reach_push_configs``): where to send a task's outcome when
it ends (the A2A door's ``Pusher``), so a restart forgets none of an unfinished task's.

One row per (task, config id); the config itself is the door's JSON, opaque here. A row is
written before the config is acknowledged and deleted once its notification was delivered,
or the config deleted. A notification that could not be delivered keeps its row, marked
``dead`` with the reason: a dead letter that a restart keeps and an operator can replay
(``reach pushes --replay``). Bounded: ``load`` reads at most the door's own bound on configs
(``limit``), the oldest first.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Table, delete, insert, select, update
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


PUSHES: Table = PushRow.__table__  # type: ignore[attr-defined]


def _one(task_id: str, config_id: str) -> Any:
    """The row of one config."""
    return (PUSHES.c.task_id == task_id) & (PUSHES.c.config_id == config_id)


class Kept(NamedTuple):
    """One kept config: its task, its JSON, and, for a dead letter, why and when."""

    task_id: str
    body: str
    dead: str | None
    dead_at: float


def load(engine: Engine, limit: int) -> list[Kept]:
    """The oldest ``limit`` kept configs, dead letters included, oldest first."""
    c = PUSHES.c
    with engine.connect() as conn:
        rows = conn.execute(select(c.task_id, c.body, c.dead, c.dead_at)
                            .order_by(c.created_at, c.task_id).limit(limit))
        return [Kept(task_id, body, dead, dead_at or 0.0)
                for task_id, body, dead, dead_at in rows]


def keep(engine: Engine, task_id: str, config_id: str, body: str, now: float) -> None:
    """Write one config (replacing the row of the same task and id)."""
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))
        conn.execute(insert(PUSHES).values(task_id=task_id, config_id=config_id, body=body,
                                           created_at=now))


def forget(engine: Engine, task_id: str, config_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))


def mark_dead(engine: Engine, task_id: str, config_id: str, reason: str, now: float) -> None:
    """Mark one config's notification undelivered (a dead letter) with ``reason``."""
    with engine.begin() as conn:
        conn.execute(update(PUSHES).where(_one(task_id, config_id))
                     .values(dead=reason[:1000], dead_at=now))
