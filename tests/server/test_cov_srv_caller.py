"""The caller session's rarer paths over a real loopback coordinator, spoken raw (as
tests/conformance does): a refused hello, status/result for ids nobody knows, the late duplicate
(an idempotency key whose first task is only in the store), a task that ends before its commit
does, and a caller that leaves with acknowledgements still deferred."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conformance.rawpeer import Peer, agent, answer, caller, submit

from reach import Reach
from reach.server.caller_session import CallerSession

JOB = {"name": "job.run", "idempotent": True, "intents": ["run the nightly job"]}
OTHER = {"name": "other.run"}
NOBODY = "0" * 32  # a well-formed task id no task has


async def serve_all(peer: Peer) -> asyncio.Task[None]:
    """Answer every invoke at once with its params."""
    async def run() -> None:
        while True:
            invoke = await peer.expect("invoke", timeout=30)
            await answer(peer, invoke, invoke["params"])
    return asyncio.get_running_loop().create_task(run())


@pytest.fixture
async def reach(tmp_path: Path) -> AsyncIterator[Reach]:
    # recent_tasks=1: a finished task leaves memory as soon as the next one finishes
    async with Reach.start(heartbeat_interval=0.1, recent_tasks=1,
                           store=f"sqlite:///{tmp_path / 'r.db'}") as coordinator:
        yield coordinator


async def test_a_hello_with_a_refused_token_is_answered_and_closed() -> None:
    async with Reach.start(heartbeat_interval=0.1, tokens={"t-ok": "bob"}) as reach:
        peer = await Peer.open(reach.url)
        await peer.send({"v": 1, "type": "hello", "caller": "bob", "token": "t-wrong"})
        refused = await peer.recv()
        assert refused["type"] == "error" and refused["error"]["code"] == "unauthorized"
        code, _ = await peer.closed()
        assert code == 1008
        async with asyncio.timeout(2):  # no caller session outlives the refusal
            while reach.channel.sessions:
                await asyncio.sleep(0.005)
        ok = await caller(reach.url, "bob", token="t-ok")  # the right token still works
        await ok.close()


async def test_status_and_result_for_an_unknown_id_answer_no_such_task(reach: Reach) -> None:
    boss = await caller(reach.url, "boss")
    await boss.send({"v": 1, "type": "status", "id": 7, "task_id": NOBODY})
    await boss.send({"v": 1, "type": "result", "id": 8, "task_id": NOBODY})
    for req_id in (7, 8):
        frame = await boss.expect("error", id=req_id)
        err = frame["error"]
        assert err["code"] == "invalid_params"
        assert err["details"] == {"task_id": NOBODY, "reason": "no such task"}
        assert repr(NOBODY) in err["message"] and "'boss'" in err["message"]
    await boss.close()


async def _evicted_first(reach: Reach, boss: Peer, key: str) -> str:
    """Run a task under ``key``, then another, so the first is in the store only."""
    await boss.send(submit(1, "job.run", {"n": 1}, idempotency_key=key))
    first = await boss.expect("accepted", id=1)
    assert (await boss.outcome(1))["result"] == {"n": 1}
    await boss.send(submit(2, "job.run", {"n": 2}))
    assert (await boss.outcome(2))["result"] == {"n": 2}
    task_id: str = first["task_id"]
    assert reach.gateway.find(task_id) is None  # out of memory: only the store has it
    return task_id


async def test_a_late_duplicate_is_read_back_from_the_store(reach: Reach) -> None:
    worker = await agent(reach.url, "w", [JOB, OTHER])
    server = await serve_all(worker)
    boss = await caller(reach.url, "boss")
    first = await _evicted_first(reach, boss, "k-late")
    # The same key again: acknowledged as a duplicate of the first, with its outcome.
    await boss.send(submit(3, "job.run", {"n": 1}, idempotency_key="k-late"))
    accepted = await boss.expect("accepted", id=3)
    assert accepted["task_id"] == first and accepted["duplicate"] is True
    done = await boss.outcome(3)
    assert done["type"] == "result" and done["result"] == {"n": 1}
    assert done["task_id"] == first
    # By intent (no capability named): no same-work check to make, still the duplicate.
    await boss.send({"v": 1, "type": "submit", "id": 4, "intent": "run the nightly job",
                     "params": {"n": 1}, "idempotency_key": "k-late", "wait": False})
    by_intent = await boss.expect("accepted", id=4)
    assert by_intent["task_id"] == first and by_intent["duplicate"] is True
    # The key reused for other work: refused, naming the first task.
    await boss.send(submit(5, "other.run", {}, idempotency_key="k-late"))
    refused = (await boss.expect("error", id=5))["error"]
    assert refused["code"] == "invalid_params"
    assert "already used for 'job.run'" in refused["message"]
    assert refused["details"]["task_id"] == first
    assert refused["details"]["capability"] == "other.run"
    server.cancel()
    await boss.close()


async def test_a_late_duplicate_whose_first_row_is_gone_is_refused(
        reach: Reach, tmp_path: Path) -> None:
    worker = await agent(reach.url, "w", [JOB])
    server = await serve_all(worker)
    boss = await caller(reach.url, "boss")
    first = await _evicted_first(reach, boss, "k-gone")
    await reach.store.flush()
    with sqlite3.connect(tmp_path / "r.db") as db:  # an operator deleted the row
        assert db.execute("DELETE FROM reach_tasks WHERE task_id = ?", (first,)).rowcount == 1
    await boss.send(submit(3, "job.run", {"n": 1}, idempotency_key="k-gone"))
    refused = await boss.expect("error", id=3)
    assert refused["error"]["code"] == "reach_error"
    assert refused["error"]["message"] == \
        "the first task of this idempotency key was not found"
    server.cancel()
    await boss.close()


async def test_a_task_that_ends_before_its_commit_answers_in_one_frame() -> None:
    """The commit is held; meanwhile the task is refused a slot (the agent's one slot is busy,
    its queue_wait=0) and fails. Once stored, one frame acknowledges and answers: it carries the
    trace id an ``accepted`` would have, and no ``accepted`` follows."""
    async with Reach.start(heartbeat_interval=0.1, queue_wait=0) as reach:
        worker = await agent(reach.url, "w", [JOB], max_concurrency=1)  # never answers
        boss = await caller(reach.url, "boss")
        await boss.send(submit(1, "job.run", {}))  # takes the only slot
        await boss.expect("accepted", id=1)
        busy = await worker.expect("invoke")
        store: Any = reach.store
        real, release = store._run, asyncio.Event()

        async def held(fn: Any, *args: Any) -> Any:  # the store's writer waits on the commit
            if fn == store._commit:
                await release.wait()
            return await real(fn, *args)

        store._run = held
        try:
            await boss.send(submit(2, "job.run", {}, queue_wait=0))  # (no backlog wait)
            async with asyncio.timeout(2):
                while not reach.gateway.book.recent:  # finished, not yet answered
                    await asyncio.sleep(0.005)
            await boss.silent(0.01)  # nothing acknowledged before the commit
        finally:
            release.set()
            store._run = real
        frame = await boss.recv()
        assert frame["type"] == "error" and frame["id"] == 2
        assert frame["error"]["code"] == "rejected" and len(frame["trace_id"]) == 32
        await boss.silent(0.05)
        await answer(worker, busy, "done")
        assert (await boss.outcome(1))["result"] == "done"
        await worker.close()
        await boss.close()


async def test_a_caller_leaving_with_deferred_acks_and_work_pending_ends_cleanly(
        reach: Reach, caplog: pytest.LogCaptureFixture) -> None:
    worker = await agent(reach.url, "w", [JOB])
    boss = await caller(reach.url, "boss")
    await boss.send(submit(1, "job.run", {"n": 1}, defer_ack=True))
    invoke = await worker.expect("invoke")
    [session] = [s for s in reach.channel.sessions if isinstance(s, CallerSession)]
    assert session._ack_timer is not None
    await boss.close()  # before the deferred `accepted` is due
    async with asyncio.timeout(2):
        while session in reach.channel.sessions:
            await asyncio.sleep(0.005)
    timer: Any = session._ack_timer
    assert timer is None or timer.cancelled()
    # The task itself goes on: the agent's answer still finishes it.
    await answer(worker, invoke, "late")
    async with asyncio.timeout(2):
        while (await reach.task(invoke["task_id"]) or {}).get("state") != "succeeded":
            await asyncio.sleep(0.005)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await worker.close()


async def test_a_caller_leaving_with_requests_unanswered_cancels_their_work(
        reach: Reach, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status requests still being prepared (a slow store read) when the caller leaves are
    cancelled with its session: nothing is sent on the closed socket, nothing logged."""
    reading, cancelled = asyncio.Event(), []

    async def slow_get(task_id: str) -> Any:  # a database that takes its time
        reading.set()
        try:
            await asyncio.sleep(30)  # never waited out: the session's close cancels it
        except asyncio.CancelledError:
            cancelled.append(task_id)
            raise

    monkeypatch.setattr(reach.store, "get", slow_get)
    boss = await caller(reach.url, "boss")
    await boss.send({"v": 1, "type": "status", "id": 1, "task_id": NOBODY})
    await asyncio.wait_for(reading.wait(), 2)
    await boss.close()
    async with asyncio.timeout(2):  # the session ends now, not after the read
        while reach.channel.sessions:
            await asyncio.sleep(0.005)
    assert cancelled == [NOBODY]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
