"""The phrases intent routing learned from callers' choices (``reach.core.intent_learn``), kept
in ``reach_phrases`` so a restart routes them as before.

One row per phrase key; a later choice for the same key replaces the row. The table is
bounded like the book in memory: each write keeps the newest ``LIMIT`` rows and deletes the
rest in the same transaction.
"""

from __future__ import annotations

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.engine import Engine
from sqlmodel import Field, SQLModel

from reach.core.intent_learn import LIMIT, Phrase
from reach.core.intent_text import phrase_key as key


class PhraseRow(SQLModel, table=True):
    __tablename__ = "reach_phrases"
    key: str = Field(primary_key=True)
    text: str = ""
    capability: str = ""
    caller: str = ""
    learned_at: float = Field(default=0.0, index=True)


PHRASES: Table = PhraseRow.__table__  # type: ignore[attr-defined]


def load(engine: Engine, limit: int = LIMIT) -> list[Phrase]:
    """The newest ``limit`` phrases, oldest first (the order ``Learned.add`` wants)."""
    with engine.connect() as conn:
        rows = conn.execute(select(PHRASES.c.text, PHRASES.c.capability, PHRASES.c.learned_at,
                                   PHRASES.c.caller)
                            .order_by(PHRASES.c.learned_at.desc()).limit(limit))
        return [Phrase(t, c, at, who) for t, c, at, who in reversed(list(rows))]


def keep(engine: Engine, phrase: Phrase, limit: int = LIMIT) -> None:
    """Write ``phrase`` (replacing its key's row), then drop all but the newest ``limit``."""
    k = key(phrase.text)
    with engine.begin() as conn:
        conn.execute(delete(PHRASES).where(PHRASES.c.key == k))
        conn.execute(insert(PHRASES).values(key=k, text=phrase.text,
                                            capability=phrase.capability,
                                            caller=phrase.caller, learned_at=phrase.learned_at))
        newest = (select(PHRASES.c.key).order_by(PHRASES.c.learned_at.desc())
                  .limit(limit).scalar_subquery())
        conn.execute(delete(PHRASES).where(PHRASES.c.key.not_in(newest)))


def forget(engine: Engine, text: str) -> bool:
    """Delete the phrase for this request (by its key); whether there was one."""
    with engine.begin() as conn:
        return bool(conn.execute(delete(PHRASES).where(PHRASES.c.key == key(text))).rowcount)
