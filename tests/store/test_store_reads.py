"""The store's reads on SQLite and PostgreSQL alike (``store_url``): dead letters, traces,
prefixes, keys by age and a task's whole row back after a reopen."""

from __future__ import annotations

from sqlalchemy import text

from reach.core.tasks import Attempt, Envelope, Outcome, Task, TaskState, new_task
from reach.store.connect import make_engine
from reach.store.store import Store


def task(tid: str, trace: str, created: float) -> Task:
    return new_task(Envelope(task_id=tid, trace_id=trace, capability="x.y",
                             params={"n": tid, "text": "中文"}, caller="c",
                             idempotency_key=f"c/{tid}", created_at=created,
                             timeout=2.5, priority=7, tags={"region": "eu"}), created)


async def test_every_read_answers_the_same_on_both_databases(store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        tasks = [task("aa1", "tr-1", 1.0), task("aa2", "tr-1", 2.0), task("ab3", "tr-2", 3.0),
                 task("b4", "tr-3", 4.0)]
        for t in tasks:
            await store.insert(t)
        dead, done = tasks[1], tasks[2]
        dead.attempts.append(Attempt(number=1, agent_id="id-a", agent="a", started_at=2.0,
                                     ended_at=2.5, outcome=Outcome.FAULT, error="boom"))
        dead.move(TaskState.DISPATCHED, 2.1)
        dead.move(TaskState.DEAD, 2.6, "attempts exhausted")
        dead.error = {"code": "task_failed", "message": "boom"}
        done.move(TaskState.DISPATCHED, 3.1)
        done.move(TaskState.SUCCEEDED, 3.2)
        done.result = {"ok": [1, 2]}
        store.update(dead)
        store.update(done)
        await store.flush()
        assert [t.task_id for t in await store.dead()] == ["aa2"]
        assert await store.dead(since=10.0) == []
        assert [t.task_id for t in await store.trace_tasks(["tr-1", "tr-3"])] == \
            ["aa1", "aa2", "b4"]
        assert [t.task_id for t in await store.recent_traces(2)] == ["ab3", "b4"]
        assert await store.match("aa") == (["aa1", "aa2"], [])
        assert await store.match("tr-") == ([], ["tr-1", "tr-2"])
        assert await store.keys_since(2.0) == [("c/aa2", "aa2", 2.0), ("c/ab3", "ab3", 3.0),
                                               ("c/b4", "b4", 4.0)]
        assert await store.keys_since(0.0, limit=1) == [("c/b4", "b4", 4.0)]
        assert {t.task_id for t in await store.unfinished()} == {"aa1", "b4"}
    finally:
        await store.close()
    again = Store(store_url)
    await again.open()
    try:
        got = await again.get("aa2")
        assert got is not None and got.state is TaskState.DEAD
        assert got.envelope.params == {"n": "aa2", "text": "中文"}
        assert (got.envelope.timeout, got.envelope.priority, got.envelope.tags) == \
            (2.5, 7, {"region": "eu"})
        assert got.error == {"code": "task_failed", "message": "boom"}
        assert [(a.agent, a.outcome, a.error) for a in got.attempts] == \
            [("a", Outcome.FAULT, "boom")]
        assert [h[0] for h in got.history] == ["pending", "dispatched", "dead"]
        ok = await again.get("ab3")
        assert ok is not None and ok.result == {"ok": [1, 2]}
        assert await again.get("nope") is None
    finally:
        await again.close()


async def test_a_task_id_twice_fails_its_group_and_is_no_key_duplicate(store_url: str) -> None:
    store = Store(store_url)
    await store.open()
    try:
        await store.insert(task("same", "tr", 1.0))
        clash = task("same", "tr", 2.0)
        clash.envelope.idempotency_key = "c/other"  # not a key clash: the task id is taken
        try:
            await store.insert(clash)
        except Exception as exc:
            assert "DuplicateKey" not in type(exc).__name__
            assert "unique" in str(exc).lower() or "duplicate key" in str(exc).lower()
        else:
            raise AssertionError("a second row with the same task id was stored")
        await store.insert(task("next", "tr", 3.0))  # the writer goes on
        assert {t.task_id for t in await store.unfinished()} == {"same", "next"}
    finally:
        await store.close()


async def test_what_a_task_has_not_got_is_stored_as_sql_null(store_url: str) -> None:
    """No result yet, no error, no tags, no parent: SQL NULL in the row (what the store's own
    ``IS NULL`` reads and an operator's query expect), not a text or a JSON ``null``."""
    store = Store(store_url)
    await store.open()
    try:
        bare = new_task(Envelope(task_id="bare", trace_id="tr", capability="x.y", params={},
                                 caller="c", idempotency_key="c/bare", created_at=1.0), 1.0)
        await store.insert(bare)
        await store.flush()
    finally:
        await store.close()
    engine = make_engine(store_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text(
                "SELECT task_id FROM reach_tasks WHERE result IS NULL AND error IS NULL "
                "AND tags IS NULL AND parent_task_id IS NULL AND timeout IS NULL "
                "AND traceparent IS NULL AND follow IS NULL AND owner IS NULL")).all()
    finally:
        engine.dispose()
    assert [r[0] for r in row] == ["bare"]
