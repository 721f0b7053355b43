"""Group commit under load: the writer waits for the last group's submitters to come back,
never longer than ``group_window``, and a partial group still commits."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from reach.core.tasks import Envelope, Task, new_task
from reach.store.store import Store


def _task(i: int) -> Task:
    now = time.time()
    return new_task(Envelope(task_id=f"t-{i}", trace_id="tr", capability="x.y", params={},
                             caller="c", idempotency_key=f"k-{i}"), now)


async def _group(store: Store, start: int, n: int) -> None:
    await asyncio.gather(*(store.insert(_task(i)) for i in range(start, start + n)))


async def test_a_full_group_commits_without_waiting_out_the_window(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}", group_window=30.0)
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


async def test_a_partial_group_commits_when_the_window_ends(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'p.db'}", group_window=0.05)
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
