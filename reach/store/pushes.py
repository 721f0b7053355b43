"""Push notification configs kept (``reach_push_configs``): where to send a task's outcome when
it ends (the A2A door's ``Pusher``), so a restart forgets none of an unfinished task's.

One row per (task, config id); the config itself is the door's JSON, opaque here. A row is
written before the config is acknowledged and deleted once its notification was delivered
or dead-lettered, or the config deleted. Bounded: ``load`` reads at most the door's own bound
on configs (``limit``), the oldest first.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel


class PushRow(SQLModel, table=True):
    __tablename__ = "reach_push_configs"
    task_id: str = Field(primary_key=True)
    config_id: str = Field(primary_key=True)
    body: str = "{}"
    created_at: float = Field(default=0.0, index=True)


PUSHES: Table = PushRow.__table__  # type: ignore[attr-defined]


def _one(task_id: str, config_id: str) -> Any:
    """The row of one config."""
    return (PUSHES.c.task_id == task_id) & (PUSHES.c.config_id == config_id)


def load(engine: Engine, limit: int) -> list[tuple[str, str]]:
    """(task id, config JSON) of the oldest ``limit`` kept configs, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(select(PUSHES.c.task_id, PUSHES.c.body)
                            .order_by(PUSHES.c.created_at, PUSHES.c.task_id).limit(limit))
        return [(task_id, body) for task_id, body in rows]


def keep(engine: Engine, task_id: str, config_id: str, body: str, now: float) -> None:
    """Write one config (replacing the row of the same task and id)."""
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))
        conn.execute(insert(PUSHES).values(task_id=task_id, config_id=config_id, body=body,
                                           created_at=now))


def forget(engine: Engine, task_id: str, config_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(PUSHES).where(_one(task_id, config_id)))
