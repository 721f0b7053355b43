"""Several coordinators' stores on one real PostgreSQL database: task owners, leases in the
database's clock, take-over by ``SKIP LOCKED`` (two survivors racing), a key that runs once
across the cluster, and fencing of a node whose tasks were taken over."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest

from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.store.nodes import Nodes
from reach.store.postgres import DuplicateKey
from reach.store.store import Fenced, Store


def task(key: str | None = None, created: float = 1.0) -> Task:
    tid = os.urandom(8).hex()
    return new_task(Envelope(task_id=tid, trace_id=tid, capability="x.y", params={"k": key},
                             caller="c", idempotency_key=key or f"c/{tid}",
                             created_at=created), created)


# ------------------------------------------------------------------ owners


async def test_a_node_resumes_only_its_own_tasks_and_alone_one_resumes_all(
        open_store: Callable[..., Any]) -> None:
    a, b, alone = (await open_store(node_id="a"), await open_store(node_id="b"),
                   await open_store())
    ta, tb = task(), task()
    await a.insert(ta)
    await b.insert(tb)
    assert [t.task_id for t in await a.unfinished()] == [ta.task_id]
    assert [t.task_id for t in await b.unfinished()] == [tb.task_id]
    assert {t.task_id for t in await alone.unfinished()} == {ta.task_id, tb.task_id}


def test_node_id_needs_postgresql() -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        Store("sqlite://", node_id="a")


# ------------------------------------------------------------------ leases


async def test_leases_live_expire_renew_and_leave(open_store: Callable[..., Any]) -> None:
    store = await open_store()
    a, b = Nodes(store), Nodes(store)
    await a.join("a", "ws://a", lease_s=30)
    await b.join("b", "ws://b", lease_s=30)  # (a short lease here: a slow host expires it)
    assert [n.node_id for n in await a.live()] == ["a", "b"]
    await b.join("b", "ws://b", lease_s=0.05)  # b's last renewal, then silence
    await asyncio.sleep(0.08)  # b's lease (in the database's clock) runs out
    assert [n.node_id for n in await a.live()] == ["a"]
    assert [n.node_id for n in await a.expired()] == ["b"]
    assert await a.renew() is True
    assert await b.renew() is False  # lost: b must stop acknowledging
    await a.leave()
    assert await a.renew() is False  # its row is gone
    assert await a.live() == []
    with pytest.raises(RuntimeError, match="join"):
        await Nodes(store).renew()


async def test_a_lost_lease_fences_the_store_until_it_joins_again(
        open_store: Callable[..., Any]) -> None:
    store = await open_store(node_id="b")
    nodes = Nodes(store)
    await nodes.join("b", "ws://b", lease_s=30)  # (a short lease here: a slow host loses it)
    assert nodes.holds() and not nodes.holds(now=nodes.valid_until)
    await nodes.join("b", "ws://b", lease_s=0.05)  # its last renewal, then silence
    await asyncio.sleep(0.08)
    assert not nodes.holds()  # by this machine's clock too
    assert await nodes.renew() is False
    assert store.fenced is not None and "lease was lost" in store.fenced
    with pytest.raises(Fenced, match="not accepting tasks"):
        await store.insert(task())  # so the gateway acknowledges nothing
    assert await store.unfinished() == []
    await nodes.join("b", "ws://b", lease_s=30)  # back, with a new lease
    assert store.fenced is None and nodes.holds()
    await store.insert(task())
    assert await nodes.renew() is True


def test_nodes_need_postgresql() -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        Nodes(Store("sqlite://"))


# ------------------------------------------------------------------ take-over


async def test_two_survivors_racing_take_a_dead_nodes_tasks_once_each(
        open_store: Callable[..., Any]) -> None:
    dead = await open_store(node_id="dead")
    tasks = [task(created=float(i)) for i in range(60)]
    await asyncio.gather(*(dead.insert(t) for t in tasks))
    done = tasks[0]
    done.move(TaskState.SUCCEEDED, 2.0)
    await dead.persist(done)  # a finished task is not taken over
    s1, s2 = await open_store(node_id="s1"), await open_store(node_id="s2")
    n_dead, n1, n2 = Nodes(dead), Nodes(s1), Nodes(s2)
    await n_dead.join("dead", "ws://dead", lease_s=30)
    await n1.join("s1", "ws://s1", lease_s=30)
    await n2.join("s2", "ws://s2", lease_s=30)
    assert await n1.take_over("dead", "s1") == []  # its lease still runs
    await n_dead.join("dead", "ws://dead", lease_s=0.01)  # its last renewal, then silence
    await asyncio.sleep(0.03)
    assert await n1.orphan_owners() == ["dead"]

    async def drain(nodes: Nodes, me: str) -> list[Task]:
        got: list[Task] = []
        while batch := await nodes.take_over("dead", me, limit=7):
            got += batch
        return got
    got1, got2 = await asyncio.gather(drain(n1, "s1"), drain(n2, "s2"))
    ids1, ids2 = {t.task_id for t in got1}, {t.task_id for t in got2}
    assert not ids1 & ids2 and len(got1) + len(got2) == 59  # disjoint, each once
    assert ids1 | ids2 == {t.task_id for t in tasks[1:]}
    assert {t.task_id for t in await s1.unfinished()} == ids1
    assert await n1.orphan_owners() == []
    assert [n.node_id for n in await n1.expired()] == []  # the dead node's row went


async def test_rows_another_survivor_is_moving_are_skipped_not_waited_for(
        open_store: Callable[..., Any], pg_url: str) -> None:
    import psycopg

    dead, me = await open_store(node_id="dead"), await open_store(node_id="me")
    tasks = [task(created=float(i)) for i in range(10)]
    await asyncio.gather(*(dead.insert(t) for t in tasks))
    n_dead, n_me = Nodes(dead), Nodes(me)
    await n_dead.join("dead", "ws://dead", lease_s=0.01)
    await n_me.join("me", "ws://me", lease_s=30)
    await asyncio.sleep(0.03)
    with psycopg.connect(pg_url) as other:  # another survivor, mid-transaction on 4 rows
        held = [r[0] for r in other.execute(
            "SELECT task_id FROM reach_tasks ORDER BY created_at LIMIT 4 FOR UPDATE")]
        async with asyncio.timeout(5):  # SKIP LOCKED: no wait for the other's commit
            first = await n_me.take_over("dead", "me")
        assert {t.task_id for t in first} == {t.task_id for t in tasks[4:]}
        assert [t.task_id for t in first] == [t.task_id for t in tasks[4:]]  # oldest first
        other.rollback()
    rest = await n_me.take_over("dead", "me")
    assert [t.task_id for t in rest] == held


async def test_a_fenced_node_takes_nothing_over(open_store: Callable[..., Any]) -> None:
    dead, me = await open_store(node_id="dead"), await open_store(node_id="me")
    await dead.insert(task())
    n_dead, n_me = Nodes(dead), Nodes(me)
    await n_dead.join("dead", "ws://dead", lease_s=0.05)
    await n_me.join("me", "ws://me", lease_s=0.05)
    await asyncio.sleep(0.08)  # both leases ran out: "me" is fenced too
    assert await n_me.take_over("dead", "me") == []
    await n_me.join("me", "ws://me", lease_s=30)  # back with a new lease
    assert len(await n_me.take_over("dead", "me")) == 1


# ------------------------------------------------------------------ fencing


async def test_a_change_to_a_task_taken_over_is_not_written_and_is_reported(
        open_store: Callable[..., Any]) -> None:
    lost: list[list[str]] = []
    old = await open_store(node_id="old", on_lost=lost.append)
    new = await open_store(node_id="new")
    mine, theirs = task(), task()
    await asyncio.gather(old.insert(mine), old.insert(theirs))
    n_old, n_new = Nodes(old), Nodes(new)
    await n_old.join("old", "ws://old", lease_s=0.05)
    await n_new.join("new", "ws://new", lease_s=30)
    await asyncio.sleep(0.08)
    taken = await n_new.take_over("old", "new")
    assert {t.task_id for t in taken} == {mine.task_id, theirs.task_id}
    [resumed] = [t for t in taken if t.task_id == theirs.task_id]
    resumed.move(TaskState.SUCCEEDED, 5.0, "by new")
    await new.persist(resumed)
    theirs.move(TaskState.FAILED, 6.0, "by old, too late")  # the old node did not know
    await old.persist(theirs)
    assert lost == [[theirs.task_id]]
    row = await new.get(theirs.task_id)
    assert row is not None and row.state is TaskState.SUCCEEDED  # the new owner's row stands


# ------------------------------------------------------------------ one key, one task


async def test_a_key_committed_by_another_node_fails_that_insert_alone(
        open_store: Callable[..., Any]) -> None:
    a, b = await open_store(node_id="a"), await open_store(node_id="b")
    first = task("c/k-1")
    await a.insert(first)
    again, other = task("c/k-1"), task("c/k-2")
    results = await asyncio.gather(b.insert(again), b.insert(other), return_exceptions=True)
    assert isinstance(results[0], DuplicateKey)
    assert results[0].first_task_id == first.task_id and results[0].key == "c/k-1"
    assert results[1] is None  # the rest of the group is committed
    assert await b.get(again.task_id) is None
    assert [t.task_id for t in await b.unfinished()] == [other.task_id]


async def test_two_nodes_inserting_one_key_at_once_store_it_once(
        open_store: Callable[..., Any]) -> None:
    a, b = await open_store(node_id="a"), await open_store(node_id="b")
    for round_ in range(5):
        key = f"c/race-{round_}"
        ta, tb = task(key), task(key)
        results = await asyncio.gather(a.insert(ta), b.insert(tb), return_exceptions=True)
        dupes = [r for r in results if isinstance(r, DuplicateKey)]
        assert len(dupes) == 1 and results.count(None) == 1, results
        winner = ta if results[0] is None else tb
        assert dupes[0].first_task_id == winner.task_id


async def test_an_old_database_with_a_key_twice_opens_without_the_index(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    import psycopg

    store = Store(pg_url)
    await store.open()
    await store.insert(task("c/same"))
    await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as before the constraint
        conn.execute("DROP INDEX ux_reach_tasks_idempotency_key")
        conn.execute("CREATE TEMP TABLE copy AS SELECT * FROM reach_tasks")
        conn.execute("UPDATE copy SET task_id = task_id || '-copy'")
        conn.execute("INSERT INTO reach_tasks SELECT * FROM copy")
    again = Store(pg_url)
    await again.open()
    try:
        assert not again.unique_keys
        assert "not unique" in caplog.text
        assert len(await again.unfinished()) == 2
    finally:
        await again.close()


async def test_postgresql_gets_the_key_and_owner_indexes_and_sqlite_neither(
        pg_url: str, tmp_path: Any) -> None:
    import sqlite3

    import psycopg

    for url in (pg_url, f"sqlite:///{tmp_path / 'plain.db'}"):
        store = Store(url)
        await store.open()
        await store.close()
    with psycopg.connect(pg_url) as conn:
        pg = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'reach_tasks'")}
    assert {"ux_reach_tasks_idempotency_key", "ix_reach_tasks_owner_unfinished"} <= pg
    with sqlite3.connect(tmp_path / "plain.db") as db:
        lite = {r[1] for r in db.execute("PRAGMA index_list(reach_tasks)")}
    assert not lite & {"ux_reach_tasks_idempotency_key", "ix_reach_tasks_owner_unfinished"}
    assert "ix_reach_tasks_trace_id" in lite


async def test_a_key_past_its_ttl_whose_task_ended_goes_to_a_new_submit(
        open_store: Callable[..., Any]) -> None:
    """Issue 27: on PostgreSQL idempotency keys honour ``idempotency_ttl`` as a SQLite
    store's do. A key whose task ended more than the TTL after its submit is new work; one
    within the TTL, or whose task is still unfinished however old, is the first task's."""
    store = await open_store(node_id="a", key_ttl=60.0, wall=lambda: 1000.0)
    ended_long_ago, unfinished, ended_lately = (task("c/old", created=100.0),
                                                task("c/live", created=100.0),
                                                task("c/new", created=990.0))
    for t in (ended_long_ago, unfinished, ended_lately):
        await store.insert(t)
    for t in (ended_long_ago, ended_lately):
        t.state = TaskState.SUCCEEDED
        await store.persist(t)
    again = [task(key, created=1000.0) for key in ("c/old", "c/live", "c/new")]
    results = await asyncio.gather(*(store.insert(t) for t in again), return_exceptions=True)
    assert results[0] is None  # expired: the new submit holds the key now
    assert isinstance(results[1], DuplicateKey) and results[1].first_task_id == \
        unfinished.task_id
    assert isinstance(results[2], DuplicateKey) and results[2].first_task_id == \
        ended_lately.task_id
    old = await store.get(ended_long_ago.task_id)
    assert old is not None and old.state is TaskState.SUCCEEDED  # kept whole, key aside
    assert old.envelope.idempotency_key == f"c/old~expired~{ended_long_ago.task_id}"
    new = await store.get(again[0].task_id)
    assert new is not None and new.envelope.idempotency_key == "c/old"
