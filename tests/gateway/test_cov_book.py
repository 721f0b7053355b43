"""The task book on its own: the memory bounds (``recent`` by count and bytes, dead letters,
idempotency keys), watchers that raise, answers held until their commit, and forgetting a
task whose first write failed."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reach.config import Settings
from reach.core.tasks import Envelope, Task, TaskState, new_task
from reach.gateway.book import TaskBook, footprint
from reach.gateway.events import DEAD_LETTER, EventBus
from reach.testing import ManualClock

S = TaskState


def make(tid: str, *, trace: str | None = None, caller: str = "c", key: str | None = None,
         params: dict[str, Any] | None = None, created: float = 0.0) -> Task:
    env = Envelope(task_id=tid, trace_id=trace or f"tr-{tid}", capability="x.work",
                   params=params or {}, caller=caller, idempotency_key=key or f"{caller}/{tid}",
                   created_at=created)
    return new_task(env, created)


def book(**settings: Any) -> tuple[TaskBook, list[dict[str, Any]]]:
    events = EventBus(ManualClock())
    seen: list[dict[str, Any]] = []
    events.listen(lambda e: seen.append(e.data) if e.kind == DEAD_LETTER else None)
    return TaskBook(Settings(**settings), events), seen


def end(b: TaskBook, task: Task, state: TaskState = S.SUCCEEDED, result: Any = None,
        at: float = 0.0) -> None:
    task.result = result
    task.state, task.updated_at = state, at  # (the gateway's transitions are not the book's)
    b.release(task)
    b.settle(task)


# ---------------------------------------------------------------- recent: the memory bound


async def test_recent_keeps_the_newest_recent_tasks_and_forgets_their_traces() -> None:
    b, _ = book(recent_tasks=2)
    tasks = [make(f"t{i}") for i in range(3)]
    for t in tasks:
        b.track(t)
    for t in tasks:
        end(b, t)
    assert list(b.recent) == ["t1", "t2"]  # the oldest went first
    assert b.find("t0") is None and b.find("t2") is tasks[2]
    assert "tr-t0" not in b.traces and b.traces["tr-t1"] == ["t1"]
    assert b._recent_bytes == footprint(tasks[1]) + footprint(tasks[2])


async def test_recent_is_bounded_in_bytes_but_keeps_the_newest_task_however_large() -> None:
    b, _ = book(recent_bytes=4000)
    small = make("small", params={"n": 1})
    big = make("big")
    b.track(small)
    b.track(big)
    end(b, small)
    assert list(b.recent) == ["small"]
    end(b, big, result="x" * 10_000)  # alone over the bound
    assert list(b.recent) == ["big"]
    assert b._recent_bytes == footprint(big) > 4000


async def test_an_evicted_task_that_shares_its_trace_leaves_the_others_in_it() -> None:
    b, _ = book(recent_tasks=1)
    first, second = make("a", trace="shared"), make("b", trace="shared")
    b.track(first)
    b.track(second)
    end(b, first)
    end(b, second)  # "a" is evicted; the trace still lists "b"
    assert list(b.recent) == ["b"] and b.traces["shared"] == ["b"]


async def test_an_evicted_task_that_runs_again_stays_in_its_trace() -> None:
    b, _ = book(recent_tasks=1)
    replayed, other = make("r"), make("o")
    b.track(replayed)
    end(b, replayed, S.DEAD)
    b.track(replayed)  # live again while its finished copy is still listed as recent
    b.track(other)
    end(b, other)  # evicts "r" from recent while it is live
    assert "r" not in b.recent and b.traces["tr-r"] == ["r"] and b.find("r") is replayed


async def test_a_task_kept_again_replaces_its_old_size() -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    end(b, t, result="short")
    end(b, t, result="a much longer result than before")
    assert list(b.recent) == ["t"] and b._recent_bytes == footprint(t)


# ---------------------------------------------------------------- dead letters


async def test_dead_letters_past_their_maximum_expire_oldest_first() -> None:
    b, seen = book(dead_letters_max=2)
    tasks = [make(f"d{i}") for i in range(3)]
    for t in tasks:
        b.track(t)
        end(b, t, S.DEAD)
    assert list(b.dead) == ["d1", "d2"]
    assert [(e["action"], e["task_id"]) for e in seen] == [
        ("added", "d0"), ("added", "d1"), ("added", "d2"), ("expired", "d0")]


async def test_prune_dead_drops_only_letters_older_than_the_retention() -> None:
    b, seen = book()
    old, new = make("old"), make("new")
    for t, at in ((old, 10.0), (new, 20.0)):
        b.track(t)
        end(b, t, S.DEAD, at=at)
    assert b.prune_dead(before=15.0) == 1
    assert list(b.dead) == ["new"] and seen[-1]["action"] == "expired"
    b.drop_dead("unknown")  # nothing to drop: no event
    assert seen[-1]["task_id"] == "old"


async def test_a_dead_letter_that_succeeds_on_replay_is_resolved() -> None:
    b, seen = book()
    t = make("t")
    b.track(t)
    end(b, t, S.DEAD)
    b.track(t)
    end(b, t, S.SUCCEEDED)
    assert "t" not in b.dead and seen[-1] == {"action": "resolved", "task_id": "t",
                                               "capability": "x.work"}


# ---------------------------------------------------------------- idempotency keys


async def test_keys_past_their_maximum_forget_the_oldest_finished_one_and_warn_once(
        caplog: pytest.LogCaptureFixture) -> None:
    b, _ = book(idempotency_keys_max=2)
    for i in range(2):
        b.remember_key(f"k{i}", f"t{i}", float(i))
    with caplog.at_level(logging.WARNING, logger="reach.gateway"):
        b.remember_key("k2", "t2", 2.0)
        b.remember_key("k3", "t3", 3.0)
    assert b.keys == {"k2": "t2", "k3": "t3"}
    warnings = [r for r in caplog.records if "idempotency_keys_max" in r.getMessage()]
    assert len(warnings) == 1


async def test_the_key_of_a_live_task_is_kept_over_the_maximum() -> None:
    b, _ = book(idempotency_keys_max=1)
    live = make("live", key="k-live")
    b.track(live)
    b.remember_key("k-live", "live", 0.0)
    b.remember_key("k-next", "next", 1.0)
    assert b.keys == {"k-live": "live", "k-next": "next"}


async def test_prune_keys_forgets_keys_past_the_ttl_unless_live_or_reused() -> None:
    b, _ = book()
    live = make("live")
    b.track(live)
    b.remember_key("old", "t-old", 1.0)
    b.remember_key("busy", "live", 2.0)
    b.remember_key("again", "t-first", 3.0)
    b.remember_key("again", "t-second", 9.0)  # reused: the newer task owns it now
    b.remember_key("new", "t-new", 10.0)
    assert b.prune_keys(before=5.0) == 1
    assert b.keys == {"busy": "live", "again": "t-second", "new": "t-new"}
    assert b.prune_keys(before=5.0) == 0


# ---------------------------------------------------------------- waiters


async def test_a_watcher_that_raises_costs_neither_the_others_nor_the_outcome(
        caplog: pytest.LogCaptureFixture) -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    heard: list[str] = []

    def broken(task: Task) -> None:
        raise RuntimeError("watcher bug")

    assert b.watch("t", broken) and b.watch("t", lambda task: heard.append(task.task_id))
    fut = b.outcome("t")
    assert fut is not None
    with caplog.at_level(logging.ERROR, logger="reach.gateway"):
        end(b, t)
    assert heard == ["t"] and fut.result() is t
    assert any("a watcher of task t failed" in r.getMessage() for r in caplog.records)
    assert not b.watch("t", heard.append)  # no longer live: nothing to watch


async def test_an_answer_waits_for_the_commit_of_the_tasks_first_write() -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    heard: list[str] = []
    b.watch("t", lambda task: heard.append(task.state.value))
    commit: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    b.commits["t"] = commit
    fut = b.outcome("t")
    assert fut is not None
    end(b, t)
    assert heard == [] and not fut.done()  # not stored yet: not told yet
    commit.set_result(None)
    await asyncio.sleep(0)
    assert heard == ["succeeded"] and fut.result() is t


async def test_an_outcome_abandoned_before_the_commit_still_lets_watchers_hear(
        caplog: pytest.LogCaptureFixture) -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    heard: list[str] = []
    b.watch("t", lambda task: heard.append(task.task_id))
    commit: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    b.commits["t"] = commit
    fut = b.outcome("t")
    assert fut is not None
    end(b, t)
    fut.cancel()  # its waiter gave up (a wait_for around it cancels the future)
    commit.set_result(None)
    with caplog.at_level(logging.ERROR):
        await asyncio.sleep(0)  # the answer runs: no InvalidStateError from the done future
    assert heard == ["t"] and fut.cancelled()
    assert not caplog.records


async def test_fail_waiters_leaves_answered_tasks_alone() -> None:
    b, _ = book()
    done, waiting = make("done"), make("waiting")
    b.track(done)
    b.track(waiting)
    done_fut, waiting_fut = b.outcome("done"), b.outcome("waiting")
    assert done_fut is not None and waiting_fut is not None
    done_fut.set_result(done)  # already answered, still listed
    b.fail_waiters(RuntimeError("stopping"))
    assert done_fut.result() is done and isinstance(waiting_fut.exception(), RuntimeError)


async def test_releasing_twice_answers_once() -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    calls: list[Task] = []
    b.watch("t", calls.append)
    end(b, t)
    b.release(t)  # nothing left to answer
    assert calls == [t] and b.outcome("t") is None


async def test_chunks_after_the_task_ended_reach_nobody() -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    got: list[tuple[str, int, Any]] = []
    b.add_chunk_sink("t", lambda *chunk: got.append(chunk))
    b.emit_chunk("t", 0, "a")
    end(b, t)
    b.emit_chunk("t", 1, "late")  # a losing hedge streaming on
    assert got == [("t", 0, "a")]


# ---------------------------------------------------------------- membership


async def test_tracking_a_live_task_again_counts_it_once() -> None:
    b, _ = book()
    t = make("t")
    b.track(t)
    b.track(t)
    assert b.usage("c") == 1 and b.traces["tr-t"] == ["t"]
    b.unlive(t)
    b.unlive(t)  # not live any more: no count goes below zero
    assert b.usage("c") == 0 and "c" not in b.caller_live


async def test_forget_removes_everything_of_a_task_that_was_never_stored() -> None:
    b, _ = book()
    t = make("t", trace="shared", key="k")
    other = make("o", trace="shared")
    b.track(t)
    b.track(other)
    b.remember_key("k", "t", 0.0)
    b.watch("t", lambda task: None)
    b.add_chunk_sink("t", lambda *c: None)
    b.forget(t)
    assert b.find("t") is None and b.outcome("t") is None and "k" not in b.keys
    assert b.traces["shared"] == ["o"] and b.usage("c") == 1
    b.forget(other)
    assert "shared" not in b.traces and b.usage("c") == 0


async def test_forget_keeps_a_key_and_trace_that_belong_to_another_task() -> None:
    b, _ = book()
    t = make("t", key="k")
    b.track(t)
    b.keys["k"] = "someone-else"  # the key now names another task
    b.traces.pop("tr-t")  # and the trace is already gone
    b.forget(t)
    assert b.keys == {"k": "someone-else"} and "tr-t" not in b.traces
