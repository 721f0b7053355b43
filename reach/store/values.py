"""Values the coordinator makes once and keeps across restarts (``reach_values``): one row per
name, written by whichever node of a cluster needs it first, read the same by every other.
Today one: the secret completion webhooks are signed with when their caller gave no token
(reach.server.notify)."""

from __future__ import annotations

from sqlalchemy import Table, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel


class ValueRow(SQLModel, table=True):
    __tablename__ = "reach_values"
    name: str = Field(primary_key=True)
    value: str = ""


VALUES: Table = ValueRow.__table__  # type: ignore[attr-defined]


def kept(engine: Engine, name: str, made: str) -> str:
    """The value kept under ``name``; ``made`` is kept (and returned) when there is none.
    Two nodes making one at once: the first write wins, and both return it."""
    query = select(VALUES.c.value).where(VALUES.c.name == name)
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is not None:
        return str(row[0])
    try:
        with engine.begin() as conn:
            conn.execute(insert(VALUES).values(name=name, value=made))
        return made
    except IntegrityError:
        with engine.connect() as conn:
            return str(conn.execute(query).scalar_one())
