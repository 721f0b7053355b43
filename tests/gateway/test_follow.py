"""reach.gateway.follow: waiting here for tasks another node drives, on a manual clock and a
dict for a store. The cluster drills run these paths only inside subprocesses, where the
store going down, a take-over meanwhile and letting go with waiters were not measured."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reach.config import Settings
from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.gateway.book import TaskBook
from reach.gateway.crew import Crew
from reach.gateway.events import EventBus
from reach.gateway.follow import Following, _copy
from reach.testing import ManualClock


class Rows:
    """What ``Following`` asks of a store: ``get``. ``down`` makes the next gets raise."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.tasks: dict[str, Task] = {}
        self.gets: list[float] = []
        self.down = 0

    async def get(self, task_id: str) -> Task | None:
        self.gets.append(self.clock.now())
        if self.down:
            self.down -= 1
            raise ConnectionError("the database went away")
        return self.tasks.get(task_id)


class Rig:
    def __init__(self, *, enabled: bool = True, limit: int = 10_000) -> None:
        self.clock = ManualClock()
        self.rows = Rows(self.clock)
        self.book = TaskBook(Settings(), EventBus(self.clock))
        self.drivers = Crew()
        self.following = Following(
            self.rows, self.book, self.clock, self.drivers,  # type: ignore[arg-type]
            enabled=enabled, every=0.05, most=1.0, limit=limit)

    def task(self, task_id: str, state: TaskState = TaskState.RUNNING) -> Task:
        task = new_task(Envelope(task_id=task_id, trace_id=f"trace-{task_id}", capability="x",
                                 params={}, caller="c", idempotency_key=f"c/{task_id}"),
                        self.clock.wall())
        task.state = state
        if state is TaskState.SUCCEEDED:
            task.result = f"done {task_id}"
        self.rows.tasks[task_id] = task
        return task

    def end(self, task_id: str) -> Task:
        return self.task(task_id, TaskState.SUCCEEDED)

    async def advance(self, seconds: float, step: float = 0.01) -> None:
        end = self.clock.now() + seconds
        while self.clock.now() < end - 1e-9:
            await self.clock.advance(min(step, end - self.clock.now()))

    async def close(self) -> None:
        await self.following.close(RuntimeError("stopped"))
        await self.drivers.stop()


@pytest.fixture
async def rig() -> Any:
    r = Rig()
    yield r
    await r.close()


async def test_a_node_alone_follows_nothing() -> None:
    rig = Rig(enabled=False)
    assert rig.following.watch("t1", lambda t: None) is False
    assert rig.following.outcome("t1") is None
    assert len(rig.following) == 0 and rig.rows.gets == []


async def test_waiters_are_answered_once_the_store_shows_the_task_ended(rig: Rig) -> None:
    rig.task("t1")
    seen: list[Task] = []
    assert rig.following.watch("t1", seen.append)
    fut = rig.following.outcome("t1")
    assert fut is not None and rig.following.outcome("t1") is fut  # one future per task
    await rig.advance(0.2)
    assert not seen and not fut.done() and len(rig.following) == 1
    rig.end("t1")
    await rig.advance(1.0)
    assert [t.result for t in seen] == ["done t1"]
    assert fut.done() and fut.result().result == "done t1"
    assert len(rig.following) == 0
    gets = len(rig.rows.gets)
    await rig.advance(3.0)
    assert len(rig.rows.gets) == gets  # the poll ended with its waiters


async def test_polls_back_off_from_every_to_most(rig: Rig) -> None:
    rig.task("t1")
    rig.following.watch("t1", lambda t: None)
    await rig.advance(5.0)
    gaps = [round(b - a, 2) for a, b in zip(rig.rows.gets, rig.rows.gets[1:], strict=False)]
    assert rig.rows.gets[0] == pytest.approx(0.05, abs=0.011)
    assert gaps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8], abs=0.011)
    assert set(gaps[4:]) == {1.0}  # capped at ``most``


async def test_a_store_that_does_not_answer_is_asked_again_more_slowly(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    rig.task("t1")
    seen: list[Task] = []
    rig.following.watch("t1", seen.append)
    rig.rows.down = 2
    with caplog.at_level(logging.WARNING, "reach.cluster"):
        await rig.advance(0.06)
        assert len(rig.rows.gets) == 1  # failed: the next look waits ``most``
        await rig.advance(0.9)
        assert len(rig.rows.gets) == 1
        rig.end("t1")
        await rig.advance(2.2)
    assert [t.result for t in seen] == ["done t1"]
    assert sum("the store did not answer" in r.getMessage() for r in caplog.records) == 2


async def test_a_task_the_store_does_not_hold_is_not_waited_for(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Task] = []
    rig.following.watch("ghost", seen.append)
    fut = rig.following.outcome("ghost")
    assert fut is not None
    with caplog.at_level(logging.WARNING, "reach.cluster"):
        await rig.advance(0.1)
    assert fut.done() and isinstance(fut.exception(), LookupError)
    assert not seen and len(rig.following) == 0
    assert any("has no such task" in r.getMessage() for r in caplog.records)


async def test_a_task_taken_over_meanwhile_is_answered_by_the_book(rig: Rig) -> None:
    task = rig.task("t1")
    seen: list[Task] = []
    rig.following.watch("t1", seen.append)
    fut = rig.following.outcome("t1")
    assert fut is not None
    rig.book.track(task)  # this node resumed it (a take-over): the next poll hands over
    await rig.advance(0.06)
    assert len(rig.following) == 0 and rig.rows.gets == []
    inner = rig.book.outcome("t1")
    assert inner is not None and rig.book.watch("t1", lambda t: None)
    task.state, task.result = TaskState.SUCCEEDED, "driven here"
    inner.set_result(task)
    await rig.clock.settle()
    assert fut.done() and fut.result().result == "driven here"
    assert rig.book._watchers["t1"][0] == seen.append  # the book answers the watcher


async def test_taken_over_hands_the_waiters_to_the_book_at_once(rig: Rig) -> None:
    task = rig.task("t1")
    rig.following.watch("t1", lambda t: None)
    rig.following.taken_over("t2")  # not followed: nothing happens
    rig.following.taken_over("t1")  # followed but not live here yet: kept
    assert len(rig.following) == 1
    rig.book.track(task)
    rig.following.taken_over("t1")
    assert len(rig.following) == 0 and "t1" in rig.book._watchers


async def test_following_is_bounded_but_a_task_already_followed_is_not_refused() -> None:
    rig = Rig(limit=2)
    try:
        for tid in ("a", "b", "c"):
            rig.task(tid)
        assert rig.following.watch("a", lambda t: None)
        assert rig.following.outcome("b") is not None
        assert rig.following.watch("c", lambda t: None) is False
        assert rig.following.outcome("c") is None
        assert rig.following.watch("a", lambda t: None)  # a second waiter of a followed task
        assert rig.following.outcome("a") is not None
        assert len(rig.following) == 2
    finally:
        await rig.close()


async def test_one_watcher_failing_does_not_cost_the_others(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    rig.end("t1")
    seen: list[str] = []

    def broken(task: Task) -> None:
        raise RuntimeError("a watcher's bug")

    rig.following.watch("t1", broken)
    rig.following.watch("t1", lambda t: seen.append(t.task_id))
    with caplog.at_level(logging.ERROR, "reach.cluster"):
        await rig.advance(0.1)
    assert seen == ["t1"]
    assert any("a watcher of task t1 failed" in r.getMessage() for r in caplog.records)


async def test_let_go_stops_the_driver_and_follows_the_waiters_in_the_store(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    task = rig.task("t1")
    rig.book.track(task)
    seen: list[Task] = []
    assert rig.book.watch("t1", seen.append)
    fut = rig.book.outcome("t1")
    assert fut is not None
    driver = rig.drivers.spawn(asyncio.Event().wait(), name="task-t1")
    other = rig.drivers.spawn(asyncio.Event().wait(), name="task-t2")
    assert rig.following.let_go(["unknown"]) == 0
    with caplog.at_level(logging.WARNING, "reach.cluster"):
        assert rig.following.let_go(["t1", "unknown"]) == 1
    await rig.clock.settle()
    assert driver.cancelled() and not other.done()
    assert "t1" not in rig.book.live and rig.book.outcome("t1") is None
    assert len(rig.following) == 1
    rig.end("t1")  # the new owner finished it
    await rig.advance(0.1)
    assert [t.result for t in seen] == ["done t1"]
    assert fut.done() and fut.result().result == "done t1"
    assert any("let go of 1 task" in r.getMessage() for r in caplog.records)
    other.cancel()


async def test_let_go_of_a_task_nobody_waits_for_follows_nothing(rig: Rig) -> None:
    task = rig.task("t1")
    rig.book.track(task)
    fut = rig.book.outcome("t1")
    assert fut is not None
    fut.set_result(task)  # answered already: nothing left to follow
    assert rig.following.let_go(["t1"]) == 1
    assert len(rig.following) == 0
    await rig.advance(0.2)
    assert rig.rows.gets == []


async def test_close_tells_every_waiter_and_stops_following(rig: Rig) -> None:
    rig.task("t1")
    rig.following.watch("t1", lambda t: None)
    fut = rig.following.outcome("t1")
    done = rig.following.outcome("t2")
    assert fut is not None and done is not None
    done.set_result(rig.end("t2"))
    await rig.following.close(RuntimeError("the coordinator stopped"))
    assert isinstance(fut.exception(), RuntimeError)
    assert done.result().result == "done t2"
    assert len(rig.following) == 0


async def test_copy_passes_on_a_result_an_error_or_a_cancel_but_never_twice() -> None:
    loop = asyncio.get_running_loop()
    source, into = loop.create_future(), loop.create_future()
    source.cancel()
    _copy(source, into)
    assert into.cancelled()
    source, into = loop.create_future(), loop.create_future()
    source.set_exception(LookupError("gone"))
    _copy(source, into)
    assert isinstance(into.exception(), LookupError)
    source, into = loop.create_future(), loop.create_future()
    into.set_result("first")
    source.set_result("second")
    _copy(source, into)
    assert into.result() == "first"
