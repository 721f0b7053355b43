"""A task's routing tags are stored with it (issue 13's tags, data residency): after a restart
a resumed task keeps them, and a database made before the column existed gets it, its old
rows reading as untagged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reach.core.tasks import Envelope, new_task
from reach.store.store import Store


def envelope(task_id: str, tags: dict[str, str | bool] | None) -> Envelope:
    return Envelope(task_id=task_id, trace_id=task_id, capability="ledger.write",
                    params={"x": 1}, caller="planner", idempotency_key=f"k-{task_id}",
                    created_at=1.0, tags=tags)


async def test_tags_survive_a_restart_of_the_store(store_url: str) -> None:
    url = store_url
    store = Store(url)
    await store.open()
    await store.insert(new_task(envelope("eu", {"region": "eu", "gpu": True}), 1.0))
    await store.insert(new_task(envelope("any", None), 1.0))
    await store.close()
    again = Store(url)
    await again.open()
    try:
        eu, anywhere = await again.get("eu"), await again.get("any")
        assert eu is not None and eu.envelope.tags == {"region": "eu", "gpu": True}
        assert anywhere is not None and anywhere.envelope.tags is None
        assert {t.task_id for t in await again.unfinished()} == {"eu", "any"}
    finally:
        await again.close()


async def test_a_database_from_before_the_column_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = Store(f"sqlite:///{path}")
    await store.open()
    await store.insert(new_task(envelope("old", None), 1.0))
    await store.close()
    with sqlite3.connect(path) as db:  # as an older version made it: no tags column
        db.execute("ALTER TABLE reach_tasks DROP COLUMN tags")
        assert "tags" not in {r[1] for r in db.execute("PRAGMA table_info(reach_tasks)")}
    store = Store(f"sqlite:///{path}")
    await store.open()
    try:
        old = await store.get("old")
        assert old is not None and old.envelope.tags is None
        await store.insert(new_task(envelope("new", {"region": "us"}), 2.0))
        new = await store.get("new")
        assert new is not None and new.envelope.tags == {"region": "us"}
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert "tags" in {r[1] for r in db.execute("PRAGMA table_info(reach_tasks)")}
