"""The push config rows (``reach_push_configs``) name the cluster node that sends them: a
database made before that column gets it at open, its old rows read as a lone coordinator's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from reach.store.store import Store


async def test_a_push_table_made_before_the_node_column_gets_it(tmp_path: Path) -> None:
    path = tmp_path / "reach.db"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE reach_push_configs (task_id VARCHAR NOT NULL, config_id "
                    "VARCHAR NOT NULL, body VARCHAR NOT NULL, created_at FLOAT NOT NULL, dead "
                    "VARCHAR, dead_at FLOAT NOT NULL, PRIMARY KEY (task_id, config_id))")
        old.execute("INSERT INTO reach_push_configs VALUES ('t1', 'c1', '{}', 1.0, NULL, 0)")
    store = Store(f"sqlite:///{path}")
    await store.open()
    try:
        await store.keep_push_config("t2", "c2", '{"id": "c2"}', 2.0)
        kept = await store.push_configs(10)
        assert [(k.task_id, k.node) for k in kept] == [("t1", None), ("t2", None)]
        assert await store.push_pending_here("t1", "c1")
    finally:
        await store.close()
