"""reach.testing's helpers do what their docstrings promise (issue 17): ``wait_until`` gives up,
``FakeAgentLink`` reports each kind of outcome and closes, ``MemoryStore`` commits, fails once
on request and answers the store's questions, ``ManualClock`` fires timers in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach.core.tasks import Envelope, new_task
from reach.ports import Work
from reach.testing import FakeAgentLink, ManualClock, MemoryStore, wait_until


class Recorder:
    """A ``ports.Reply`` that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def ack(self) -> None:
        self.events.append(("ack",))

    def chunk(self, seq: int, data: Any) -> None:
        self.events.append(("chunk", seq, data))

    def resolve(self, kind: str, payload: Any = None) -> None:
        self.events.append((kind, payload))


def work(task_id: str, attempt: int = 1) -> Work:
    return Work(task_id=task_id, attempt=attempt, capability="echo", params={"x": 1},
                idempotency_key=f"k-{task_id}", trace_id=task_id, caller="planner")


async def test_wait_until_returns_once_true_and_gives_up_after_its_timeout() -> None:
    flag = [False, False, True]
    await wait_until(lambda: flag.pop(0), interval=0.001)
    assert flag == []
    with pytest.raises(AssertionError, match=r"condition not met within 0\.01s"):
        await wait_until(lambda: False, timeout=0.01, interval=0.001)


def test_fake_agent_link_reports_each_kind_of_outcome() -> None:
    def respond(w: Work) -> Any:
        return {"t-ok": ("ok", w.params), "t-fault": ("fault", "boom"),
                "t-answer": ("answer", "no such order"), "t-silent": "silent",
                "t-hang": "hang"}.get(w.task_id)

    link = FakeAgentLink(respond)
    replies = {t: Recorder() for t in ("t-ok", "t-fault", "t-answer", "t-silent", "t-hang",
                                       "t-later")}
    for task_id, reply in replies.items():
        assert link.deliver(work(task_id), reply)
    assert replies["t-ok"].events == [("ack",), ("ok", {"x": 1})]
    assert replies["t-fault"].events == [("ack",), ("error", {
        "code": "task_failed", "message": "boom", "details": {}})]
    assert replies["t-answer"].events == [("ack",), ("error", {
        "code": "task_failed", "message": "no such order", "details": {"answer": True}})]
    assert replies["t-silent"].events == []          # never acknowledged
    assert replies["t-hang"].events == [("ack",)]    # acknowledged, never answered
    assert [w.task_id for w in link.delivered] == list(replies)

    # answered later by the test: any kind the gateway knows goes through as it is
    link.finish("t-later", "undelivered", "agent restarted")
    assert replies["t-later"].events == [("ack",), ("undelivered", "agent restarted")]
    link.cancel("t-hang", 1)
    assert link.cancelled == [("t-hang", 1)]
    assert set(link.pending) == {("t-silent", 1)}


async def test_fake_agent_link_close_loses_what_is_in_flight_and_refuses_more() -> None:
    link = FakeAgentLink()
    first, second = Recorder(), Recorder()
    assert link.deliver(work("t1", attempt=1), first)
    assert link.deliver(work("t1", attempt=2), second)
    link.finish("t1", "ok", "second wins")            # the latest attempt by default
    assert second.events == [("ack",), ("ok", "second wins")]
    await link.close("agent deregistered")
    assert link.closed == "agent deregistered"
    assert first.events == [("ack",), ("lost", None)] and link.pending == {}
    assert not link.deliver(work("t2"), Recorder())
    assert not FakeAgentLink(accepts=False).deliver(work("t3"), Recorder())


async def test_memory_store_commits_fails_once_on_request_and_answers_queries() -> None:
    store = MemoryStore()
    await store.open()
    task = new_task(Envelope(task_id="t1", trace_id="t1", capability="echo", params={},
                             caller="planner", idempotency_key="planner:k1"), now=1.0)
    await store.insert(task)
    assert store.rows["t1"]["state"] == "pending"
    task.result = 42
    store.update(task)
    assert store.rows["t1"]["result"] == 42

    store.fail_next = True
    with pytest.raises(OSError, match="disk full"):
        await store.persist(task)
    task.result = 43
    await store.persist(task)                         # only the next commit failed
    assert store.rows["t1"]["result"] == 43 and not store.fail_next

    # what a gateway unit test needs of the rest: nothing kept beyond memory
    assert await store.get("t1") is None
    assert await store.unfinished() == []
    assert await store.dead() == []
    assert await store.keys_since(0.0) == []
    assert await store.declared() == {}
    await store.save_agent("a-1", "sales", "2", ["sales.query"], 4, now=1.0)
    assert await store.agent_ids() == {"sales": "a-1"}
    assert store.agents["sales"] == {"agent_id": "a-1", "version": "2",
                                     "capabilities": ["sales.query"], "max_concurrency": 4}
    await store.close()


async def test_manual_clock_fires_due_timers_in_order_and_skips_cancelled_ones() -> None:
    clock = ManualClock(wall=1000.0)
    fired: list[str] = []
    clock.call_at(0.3, lambda: fired.append("c"))
    clock.call_at(0.1, lambda: fired.append("a"))
    clock.call_at(0.2, lambda: fired.append("never")).cancel()
    clock.call_at(5.0, lambda: fired.append("late"))
    assert clock.pending() == 3
    await clock.advance(0.5)
    assert fired == ["a", "c"]
    assert (clock.now(), clock.wall()) == (0.5, 1000.5)
    assert clock.pending() == 1


async def test_manual_clock_sleep_ends_when_time_is_advanced_past_it() -> None:
    clock = ManualClock()
    woke: list[float] = []

    async def sleeper() -> None:
        await clock.sleep(2.0)
        woke.append(clock.now())

    task = asyncio.ensure_future(sleeper())
    await clock.advance(1.9)
    assert woke == [] and clock.pending() == 1
    await clock.advance(0.2)
    assert woke == [2.0] and clock.pending() == 0  # fired at its own time, timer gone
    await task

    cut_short = asyncio.ensure_future(clock.sleep(5.0))
    await clock.settle()
    cut_short.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cut_short
    assert clock.pending() == 0  # a cancelled sleep leaves no timer behind
