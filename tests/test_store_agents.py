"""Agents' identities ride the group commit: a reconnect storm costs a few transactions. The
store's tests run on a SQLite file and on PostgreSQL (``store_url``, tests/pg.py)."""

from __future__ import annotations

import asyncio

from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from reach.store.store import Store
from reach.store.tables import AGENTS, agent_upsert

CAPS = [{"name": "echo.run", "params": {}}]


async def test_a_second_registration_updates_the_row_and_keeps_first_seen(
        store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        await store.save_agent("ag-1", "echo", "1", CAPS, 4, now=100.0)
        await store.save_agent("ag-1", "echo", "2", [{"name": "echo.loud"}], 8, now=200.0)
        with store.engine.connect() as conn:
            row = conn.execute(select(AGENTS)).one()
        assert (row.version, row.max_concurrency, row.first_seen, row.last_registered) == \
            ("2", 8, 100.0, 200.0)
        assert await store.declared() == {"echo": ["echo.loud"]}
        assert await store.agent_ids() == {"echo": "ag-1"}
    finally:
        await store.close()


async def test_registrations_arriving_together_share_one_commit(store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        before = store.commits
        await asyncio.gather(*(store.save_agent(f"ag-{i}", f"agent-{i}", "0", CAPS, 4, 1.0)
                               for i in range(200)))
        assert store.commits - before in (1, 2)  # not 200
        assert len(await store.agent_ids()) == 200
    finally:
        await store.close()


async def test_identities_survive_a_reopen(store_url: str) -> None:
    url = store_url
    store = Store(url)
    await store.open()
    await store.save_agent("ag-7", "seven", "0", CAPS, 4, 1.0)
    await store.close()  # committed before close returns
    again = Store(url)
    await again.open()
    try:
        assert await again.agent_ids() == {"seven": "ag-7"}
    finally:
        await again.close()


def test_the_postgresql_upsert_keeps_the_id_and_first_seen() -> None:
    sql = str(agent_upsert("postgresql").compile(dialect=postgresql.dialect()))
    assert "ON CONFLICT (agent_id) DO UPDATE SET" in sql
    updated = sql.split("DO UPDATE SET", 1)[1]
    assert "last_registered = excluded.last_registered" in updated
    assert "first_seen" not in updated and "agent_id =" not in updated
    assert agent_upsert("mssql") is None  # falls back to one upsert at a time


async def test_a_registration_that_fails_does_not_fail_the_tasks_committed_beside_it(
        store_url: str) -> None:
    """Another coordinator on the same database registered the name under another id: that
    registration fails with the database's error, the tasks queued with it are stored."""
    import pytest

    from reach.core.tasks import Envelope, new_task

    store = Store(store_url)
    await store.open()
    try:
        await store.save_agent("ag-1", "echo", "1", CAPS, 4, 1.0)
        task = new_task(Envelope(task_id="t-1", trace_id="tr", capability="x.y", params={},
                                 caller="c", idempotency_key="k-1"), 2.0)
        inserted = store.insert(task)
        clash = asyncio.ensure_future(store.save_agent("ag-2", "echo", "1", CAPS, 4, 2.0))
        await inserted  # the task is stored
        with pytest.raises(Exception, match="(?i)unique"):  # the driver's IntegrityError
            await clash
        assert [t.task_id for t in await store.unfinished()] == ["t-1"]
        assert await store.agent_ids() == {"echo": "ag-1"}
    finally:
        await store.close()


async def test_a_name_clash_in_a_storm_fails_that_registration_only(store_url: str) -> None:
    """Registrations share one transaction; when it fails on a taken name, each is tried
    alone: the clashing one gets the database's error, the others are stored."""
    store = Store(store_url)
    await store.open()
    try:
        await store.save_agent("id-old", "a", "1", CAPS, 4, 0.0)
        results = await asyncio.gather(
            store.save_agent("id-new", "a", "1", CAPS, 4, 1.0),  # "a" belongs to id-old
            store.save_agent("id-b", "b", "1", CAPS, 4, 1.0),
            store.save_agent("id-c", "c", "1", CAPS, 4, 1.0),
            return_exceptions=True)
        assert "unique" in str(results[0]).lower()  # the database's own error
        assert results[1:] == [None, None]
        assert await store.agent_ids() == {"a": "id-old", "b": "id-b", "c": "id-c"}
    finally:
        await store.close()


async def test_registering_on_a_closed_store_says_so(store_url: str) -> None:
    import pytest

    store = Store(store_url)
    await store.open()
    await store.close()
    with pytest.raises(RuntimeError, match="not open"):
        await asyncio.wait_for(store.save_agent("ag-1", "a", "0", CAPS, 4, 0.0), 5)


async def test_without_an_upsert_a_registration_is_written_alone_and_keeps_first_seen(
        store_url: str) -> None:
    """A dialect without INSERT .. ON CONFLICT (``agent_upsert`` gives None): update, else
    insert, one registration at a time, with the same outcome as the upsert."""
    store = Store(store_url)
    await store.open()
    try:
        del store._sql["agent"]  # as compile_statements leaves it for such a dialect
        before = store.commits
        await store.save_agent("ag-1", "echo", "1", CAPS, 4, now=100.0)
        await store.save_agent("ag-1", "echo", "2", [{"name": "echo.loud"}], 8, now=200.0)
        assert store.commits == before  # not through the group commit
        with store.engine.connect() as conn:
            row = conn.execute(select(AGENTS)).one()
        assert (row.version, row.max_concurrency, row.first_seen, row.last_registered) == \
            ("2", 8, 100.0, 200.0)
        assert await store.declared() == {"echo": ["echo.loud"]}
    finally:
        await store.close()
