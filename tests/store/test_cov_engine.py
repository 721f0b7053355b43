"""The store's writer at its edges, on real SQLite files: a database that is not SQLite (its
transactions on the worker thread), named parameters (as PostgreSQL's driver takes them), a
dialect without an upsert, the WAL checkpoint, flush with only registrations queued, and a
store closed without ever being opened."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, create_mock_engine
from sqlalchemy.dialects import registry

from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.store.engine import make_engine
from reach.store.store import Store
from reach.store.tables import compile_statements

# A dialect that is not called "sqlite" in its URL but is SQLite underneath: the store treats
# it as a database server (as it would PostgreSQL), and the test needs no server.
registry.register("reachserver", "sqlalchemy.dialects.sqlite.pysqlite", "SQLiteDialect_pysqlite")


def _task(i: int, created: float | None = None) -> Task:
    now = time.time() if created is None else created
    return new_task(Envelope(task_id=f"t-{i}", trace_id="tr", capability="x.y",
                             params={"i": i}, caller="c", idempotency_key=f"c/k-{i}",
                             created_at=now), now)


async def test_a_server_database_runs_every_transaction_on_the_worker_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"reachserver:///{tmp_path / 'server.db'}"
    engine = make_engine(url)
    assert engine.pool._pre_ping  # a server connection may have dropped: checked before use
    engine.dispose()
    store = Store(url)
    assert store.threaded and store._checkpointer is None  # no WAL of ours to checkpoint
    threads: list[str] = []
    commit = store._commit

    def on_thread(*rows: Any) -> Any:
        threads.append(threading.current_thread().name)
        return commit(*rows)

    monkeypatch.setattr(store, "_commit", on_thread)
    await store.open()
    try:
        task = _task(1)
        await store.insert(task)
        await store.save_agent("id-a", "a", "1", [{"name": "x.y"}], 3, 1.0)
        got = await store.get("t-1")
        assert got is not None and got.envelope.params == {"i": 1}
        assert await store.agent_ids() == {"a": "id-a"}
        assert threads and all(t.startswith("reach-store") for t in threads)
    finally:
        await store.close()


async def test_a_driver_with_named_parameters_gets_each_row_as_a_mapping(
        tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'named.db'}")
    store.engine.dispose()
    store.engine = create_engine(f"sqlite:///{tmp_path / 'named.db'}", paramstyle="named")
    await store.open()
    try:
        assert store._sql["insert"][1] is None  # no column order: rows go by name
        task = _task(1)
        await store.insert(task)
        task.move(TaskState.DISPATCHED, time.time())
        await store.persist(task)
        await store.save_agent("id-a", "a", "1", [{"name": "x.y"}], 3, 1.0)
        got = await store.get("t-1")
        assert got is not None and got.state is TaskState.DISPATCHED
        assert await store.declared() == {"a": ["x.y"]}
    finally:
        await store.close()


def test_a_dialect_without_an_upsert_gets_no_agent_statement() -> None:
    mysql = create_mock_engine("mysql://", lambda *a, **k: None)  # type: ignore[arg-type]
    statements = compile_statements(mysql)
    assert set(statements) == {"insert", "update", "update_owned"}
    assert "reach_tasks" in statements["insert"][0]


async def test_the_wal_is_checkpointed_into_the_database_file_on_its_own_thread(
        tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    store = Store(f"sqlite:///{path}")
    store.CHECKPOINT_EVERY = 2
    await store.open()
    try:
        await store.insert(_task(1))
        assert store._checkpointing is None
        before = path.stat().st_size  # the rows are in the WAL, not yet in the file
        await store.insert(_task(2))  # the second commit starts a checkpoint
        checkpoint = store._checkpointing
        assert checkpoint is not None
        await checkpoint
        assert path.stat().st_size > before
        assert store._since_checkpoint == 0
    finally:
        await store.close()
    reopened = Store(f"sqlite:///{path}")
    await reopened.open()
    try:
        assert [t.task_id for t in await reopened.unfinished()] == ["t-1", "t-2"]
    finally:
        await reopened.close()


async def test_close_waits_for_a_checkpoint_still_running(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'busy.db'}")
    store.CHECKPOINT_EVERY = 1
    release = threading.Event()
    checkpoint = store._checkpoint

    def slow_checkpoint() -> None:
        release.wait(5)
        checkpoint()

    store._checkpoint = slow_checkpoint  # type: ignore[method-assign]
    await store.open()
    await store.insert(_task(1))
    running = store._checkpointing
    assert running is not None and not running.done()
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0.01)
    assert not closing.done()  # the checkpoint's connection is not pulled from under it
    release.set()
    await asyncio.wait_for(closing, 5)
    assert running.done() and running.exception() is None


async def test_flush_waits_for_registrations_queued_alone(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'flush.db'}")
    await store.open()
    try:
        saving = asyncio.ensure_future(store.save_agent("id-a", "a", "1", [], 3, 1.0))
        await asyncio.sleep(0)  # queued, not committed
        assert store._agent_rows and not (store._inserts or store._updates)
        await store.flush()
        assert await store.agent_ids() == {"a": "id-a"}
        await saving
        await store.flush()  # nothing queued: returns at once
    finally:
        await store.close()


async def test_a_store_never_opened_closes_cleanly() -> None:
    store = Store("sqlite://")
    await store.close()
    assert store._raw is None and store._writer is None


async def test_dead_letters_and_keys_with_and_without_their_bounds(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'reads.db'}")
    await store.open()
    try:
        tasks = [_task(i, created=100.0 + i) for i in range(3)]
        for task in tasks:
            await store.insert(task)
        for i, task in enumerate(tasks[:2]):
            task.move(TaskState.DEAD, 200.0 + i)
            await store.persist(task)
        assert [t.task_id for t in await store.dead()] == ["t-0", "t-1"]  # oldest first
        assert [t.task_id for t in await store.dead(since=200.5)] == ["t-1"]
        assert [t.task_id for t in await store.dead(limit=1)] == ["t-1"]  # the newest one
        assert [k for k, _, _ in await store.keys_since(0.0)] == ["c/k-0", "c/k-1", "c/k-2"]
        assert await store.keys_since(101.0, limit=1) == [("c/k-2", "t-2", 102.0)]
    finally:
        await store.close()


async def test_close_writes_an_update_still_waiting_for_its_delay(tmp_path: Path) -> None:
    path = f"sqlite:///{tmp_path / 'late.db'}"
    store = Store(path, update_delay=30.0)
    await store.open()
    task = _task(1)
    await store.insert(task)
    task.move(TaskState.DISPATCHED, time.time())
    store.update(task)  # written behind: would wait 30 s alone
    assert store._update_timer is not None
    await asyncio.wait_for(store.close(), 5)  # does not wait out the delay, and loses nothing
    assert store._update_timer is None
    reopened = Store(path)
    await reopened.open()
    try:
        got = await reopened.get("t-1")
        assert got is not None and got.state is TaskState.DISPATCHED
    finally:
        await reopened.close()


async def test_a_submitter_that_gave_up_still_gets_its_row_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(f"sqlite:///{tmp_path / 'gone.db'}")
    await store.open()
    try:
        abandoned = store.insert(_task(1))
        abandoned.cancel()  # its caller went away before the commit
        kept = store.insert(_task(2))
        await kept
        assert abandoned.cancelled()
        assert [t.task_id for t in await store.unfinished()] == ["t-1", "t-2"]
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
    finally:
        await store.close()
