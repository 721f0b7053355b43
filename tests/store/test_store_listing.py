"""One caller's tasks in pages (``Store.of_caller``, what A2A ListTasks reads), on SQLite and
PostgreSQL alike (``store_url``): by the caller's own index, past any number of other
callers' newer tasks, each task once, filtered, and bounded per page."""

from __future__ import annotations

import asyncio

from sqlalchemy import inspect, text

from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.store.connect import make_engine
from reach.store.listing import CALLER_INDEX, Page
from reach.store.store import Store


def task(tid: str, caller: str, created: float, trace: str = "tr") -> Task:
    return new_task(Envelope(task_id=tid, trace_id=trace, capability="x.y", params={},
                             caller=caller, idempotency_key=f"{caller}/{tid}",
                             created_at=created), created)


async def bulk(store: Store, tasks: list[Task]) -> None:
    """Insert ``tasks`` as a coordinator under load does: queued together, group-committed."""
    for i in range(0, len(tasks), 500):
        await asyncio.gather(*(store.insert(t) for t in tasks[i:i + 500]))


async def every_page(store: Store, caller: str, limit: int, trace_id: str | None = None,
                     scan: int = 10_000) -> list[Page]:
    """Every page, from the first, each asked with the cursor the one before gave."""
    pages = [await store.of_caller(caller, limit, trace_id=trace_id, scan=scan)]
    while pages[-1].next is not None:
        assert len(pages) < 1000, "paging does not end"
        pages.append(await store.of_caller(caller, limit, before=pages[-1].next,
                                           trace_id=trace_id, scan=scan))
    return pages


def indexes(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {str(i["name"]) for i in inspect(engine).get_indexes("reach_tasks")}
    finally:
        engine.dispose()


async def test_a_caller_pages_through_its_old_tasks_behind_many_newer_ones(
        store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        await store.index_callers()
        # three of "me"'s tasks share each creation time: the task id breaks the tie
        mine = [task(f"me-{i:02d}", "me", 1.0 + i // 3) for i in range(30)]
        others = [task(f"o-{i:05d}", f"other-{i % 10}", 100.0 + i) for i in range(3_000)]
        await bulk(store, mine + others)
        pages = await every_page(store, "me", 7)
        listed = [t.task_id for p in pages for t in p.tasks]
        newest_first = sorted(mine, key=lambda t: (t.envelope.created_at, t.task_id),
                              reverse=True)
        assert listed == [t.task_id for t in newest_first]  # each once, in order
        assert [len(p.tasks) for p in pages] == [7, 7, 7, 7, 2]
        assert {p.total for p in pages} == {30}
        theirs = await store.of_caller("other-3", 1_000)
        assert theirs.total == 300 and theirs.next is None
        assert {t.envelope.caller for t in theirs.tasks} == {"other-3"}
        nobody = await store.of_caller("nobody", 10)
        assert (nobody.tasks, nobody.total, nobody.next) == ([], 0, None)
    finally:
        await store.close()


async def test_filters_and_a_bounded_read_per_page(store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        await store.index_callers()
        mine = [task(f"me-{i:02d}", "me", 1.0 + i, "rare" if i in (3, 25) else "tr")
                for i in range(30)]
        await bulk(store, mine + [task("you-1", "you", 50.0, "rare")])
        for t in mine[20:]:  # the ten newest end; the last two ten seconds later
            t.move(TaskState.DISPATCHED, 40.0)
            t.move(TaskState.SUCCEEDED, 50.0 if t.task_id >= "me-28" else 40.0)
            store.update(t)
        await store.flush()
        done = await store.of_caller("me", 50, states=["succeeded"])
        assert [t.task_id for t in done.tasks] == [f"me-{i}" for i in range(29, 19, -1)]
        assert done.total == 10 and done.next is None
        late = await store.of_caller("me", 50, updated_after=50.0)
        assert [t.task_id for t in late.tasks] == ["me-29", "me-28"] and late.total == 2
        rare = await store.of_caller("me", 50, trace_id="rare")
        assert [t.task_id for t in rare.tasks] == ["me-25", "me-03"]
        # Each page reads at most 5 of the caller's rows: a rare match leaves pages short,
        # some empty, each with a cursor on; paging on still finds every match, once.
        pages = await every_page(store, "me", 2, trace_id="rare", scan=5)
        assert [t.task_id for p in pages for t in p.tasks] == ["me-25", "me-03"]
        assert len(pages) == 6 and [] in [p.tasks for p in pages]
        assert {p.total for p in pages} == {1}  # counted over the newest 5 only: me-25
        assert (await store.of_caller("me", 2, trace_id="rare", scan=30)).total == 2
    finally:
        await store.close()


async def test_the_index_is_made_when_asked_also_on_an_existing_database(
        store_url: str) -> None:
    engine = make_engine(store_url)  # (a PostgreSQL test database may have it from before)
    with engine.begin() as conn:
        conn.execute(text(f"DROP INDEX IF EXISTS {CALLER_INDEX}"))
    engine.dispose()
    store = Store(store_url)
    await store.open()
    try:
        await bulk(store, [task(f"t-{i}", "me", float(i)) for i in range(50)])
    finally:
        await store.close()
    assert CALLER_INDEX not in indexes(store_url)  # a coordinator that never lists: no cost
    again = Store(store_url)
    await again.open()
    try:
        assert CALLER_INDEX not in indexes(store_url)
        await again.index_callers()
        await again.index_callers()  # a second start finds it made
        assert CALLER_INDEX in indexes(store_url)
        page = await again.of_caller("me", 100)
        assert [t.task_id for t in page.tasks] == [f"t-{i}" for i in range(49, -1, -1)]
    finally:
        await again.close()
