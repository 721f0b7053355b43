"""Group commit under load: the writer waits for the last group's submitters to come back,
never longer than ``group_window``, and a partial group still commits. Each test runs on a
SQLite file and on PostgreSQL (``store_url``, tests/pg.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.store.store import Store


def _task(i: int) -> Task:
    now = time.time()
    return new_task(Envelope(task_id=f"t-{i}", trace_id="tr", capability="x.y", params={},
                             caller="c", idempotency_key=f"k-{i}"), now)


async def _group(store: Store, start: int, n: int) -> None:
    await asyncio.gather(*(store.insert(_task(i)) for i in range(start, start + n)))


async def test_a_full_group_commits_without_waiting_out_the_window(store_url: str) -> None:
    store = Store(store_url, group_window=30.0)
    await store.open()
    try:
        await _group(store, 0, 2)  # warm: not under load yet
        await _group(store, 2, 8)  # a group of 8: the writer now gathers
        commits = store.commits
        async with asyncio.timeout(10):  # far less than the 30 s window
            await _group(store, 10, 8)
        assert store.commits == commits + 1  # the 8 came back together: one transaction
    finally:
        async with asyncio.timeout(10):  # closing does not wait out the window either
            await store.close()


async def test_a_partial_group_commits_when_the_window_ends(store_url: str) -> None:
    store = Store(store_url, group_window=0.05)
    await store.open()
    try:
        await _group(store, 0, 2)
        await _group(store, 2, 8)
        async with asyncio.timeout(10):
            await _group(store, 10, 3)  # fewer than the last group: waits the window, then
        assert store._last_group == 3  # commits
        assert len(await store.unfinished()) == 13
    finally:
        await store.close()


# ------------------------------------------------------------------ the writer's other paths

def _stores(store_url: str, tmp_path: Path, name: str) -> list[Store]:
    """The store of ``store_url``; for SQLite also its writer on a worker thread (the loop
    is the default there)."""
    if not store_url.startswith("sqlite"):
        return [Store(store_url)]
    return [Store(store_url), Store(f"sqlite:///{tmp_path / ('t-' + name)}", threaded=True)]


async def test_persist_of_a_queued_insert_is_that_insert(store_url: str, tmp_path: Path) -> None:
    for store in _stores(store_url, tmp_path, "persist.db"):
        await store.open()
        try:
            task = _task(1)
            inserted = store.insert(task)
            task.move(TaskState.QUEUED, 1.0)
            assert store.persist(task) is inserted  # one row, built from the latest state
            await inserted
            got = await store.get("t-1")
            assert got is not None and got.state is TaskState.QUEUED
        finally:
            await store.close()


async def test_persist_and_update_of_a_stored_task_reach_the_row(store_url: str, tmp_path: Path) -> None:
    for store in _stores(store_url, tmp_path, "later.db"):
        await store.open()
        try:
            task = _task(1)
            await store.insert(task)
            task.move(TaskState.QUEUED, 1.0)
            await store.persist(task)
            got = await store.get("t-1")
            assert got is not None and got.state is TaskState.QUEUED
            task.move(TaskState.DISPATCHED, 2.0)
            store.update(task)  # written behind: flush waits for it
            await store.flush()
            got = await store.get("t-1")
            assert got is not None and got.state is TaskState.DISPATCHED
            assert [h[0] for h in got.history] == ["pending", "queued", "dispatched"]
        finally:
            await store.close()


async def test_an_update_alone_is_written_after_update_delay(store_url: str) -> None:
    store = Store(store_url, update_delay=0.01)
    await store.open()
    try:
        task = _task(1)
        await store.insert(task)
        commits = store.commits
        task.move(TaskState.QUEUED, 1.0)
        store.update(task)
        async with asyncio.timeout(5):
            while store.commits == commits:
                await asyncio.sleep(0.005)
        got = await store.get("t-1")
        assert got is not None and got.state is TaskState.QUEUED
    finally:
        await store.close()


async def test_a_failed_commit_fails_its_submitters_and_the_writer_goes_on(
        store_url: str, tmp_path: Path) -> None:
    for store in _stores(store_url, tmp_path, "fail.db"):
        await store.open()
        real = store._write_group

        async def broken(*args: Any) -> Any:
            raise OSError("disk full")

        try:
            store._write_group = broken  # type: ignore[method-assign]
            futures = [store.insert(_task(i)) for i in range(3)]
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert all(isinstance(r, OSError) for r in results)
            store._write_group = real  # type: ignore[method-assign]
            await store.insert(_task(9))
            assert [t.task_id for t in await store.unfinished()] == ["t-9"]
            assert store.rows_written == 1
        finally:
            await store.close()


async def test_max_batch_one_is_a_commit_per_task(store_url: str) -> None:
    store = Store(store_url, max_batch=1)
    await store.open()
    try:
        commits = store.commits
        await _group(store, 0, 5)
        assert store.commits - commits == 5
        assert len(await store.unfinished()) == 5
    finally:
        await store.close()


async def test_close_commits_what_is_queued(store_url: str) -> None:
    url = store_url
    store = Store(url)
    await store.open()
    task = _task(1)
    inserted = store.insert(task)
    task.move(TaskState.QUEUED, 1.0)
    store.update(task)
    await store.close()
    assert inserted.done() and inserted.exception() is None
    again = Store(url)
    await again.open()
    try:
        got = await again.get("t-1")
        assert got is not None and got.state is TaskState.QUEUED
    finally:
        await again.close()
