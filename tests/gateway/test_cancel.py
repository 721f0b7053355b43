"""Cancelling a task (issue 27): wherever its life is, it ends ``cancelled`` at once, leaves
nothing behind (no slot, no place in a queue, no waiter, no deadline), its caller hears
``Cancelled``, and an attempt in flight is given up with its agent told to stop. A task
abandoned by a stop is not told: it resumes, and goes back to the agent whose key cache
knows it. A real ``Gateway`` on fakes and a ``ManualClock`` (test_decisions' rig).
"""

from __future__ import annotations

from typing import Any

from test_decisions import Rig, ok

from reach.core.tasks import Outcome, TaskState
from reach.errors import Cancelled, from_wire

S = TaskState


async def test_a_running_task_cancelled_ends_at_once_and_its_agent_is_told() -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", None)
        task = await rig.submit()
        assert task.state is S.RUNNING and record.inflight == 1
        outcome = rig.gateway.outcome(task.task_id)
        assert outcome is not None
        assert rig.gateway.cancel(task.task_id, "tester", "changed my mind") is task
        assert task.state is S.CANCELLED and task.error is not None
        error = from_wire(task.error)
        assert isinstance(error, Cancelled)
        assert error.message == "cancelled by tester: changed my mind"
        assert error.details["by"] == "tester"
        assert link.cancelled == [(task.task_id, 1)]  # the agent is told to stop
        assert record.inflight == 0 and rig.gateway.in_flight == 0
        assert [a.outcome for a in task.attempts] == [Outcome.CANCELLED]
        assert (await outcome).state is S.CANCELLED
        assert task.task_id not in rig.gateway.dead  # not a dead letter: nothing failed
        assert rig.store.rows[task.task_id]["state"] == "cancelled"
        history = list(task.history)
        await rig.clock.advance(60.0)  # no deadline of it is left to fire
        assert task.state is S.CANCELLED and task.history == history
        breaker = record.breaker
        assert breaker.state.value == "closed" and not breaker.outcomes  # not judged
    finally:
        await rig.close()


async def test_a_task_waiting_its_turn_cancelled_leaves_the_queue_and_the_backlog() -> None:
    rig = Rig()
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        first = await rig.submit()
        waiting = await rig.submit()
        assert waiting.state is S.QUEUED and rig.gateway.book.backlog.depth("x.work") == 1
        rig.gateway.cancel(waiting.task_id, "tester")
        assert waiting.state is S.CANCELLED and rig.gateway.book.backlog.tasks == {}
        assert rig.gateway.slots.waiting("x.work") == 0 and not waiting.attempts
        link.finish(first.task_id, "ok", 1)  # the freed slot goes to no cancelled task
        await rig.clock.settle()
        assert len(link.delivered) == 1 and first.state is S.SUCCEEDED
    finally:
        await rig.close()


async def test_a_task_waiting_for_an_agent_cancelled_is_not_woken_later() -> None:
    rig = Rig()
    try:
        record, _ = rig.agent("a", ok)
        rig.registry.disconnected(record, rig.clock.wall())
        task = await rig.submit()
        assert task.state is S.QUEUED
        rig.gateway.cancel(task.task_id, "tester")
        _, link = rig.agent("a", ok)  # the agent's return wakes nobody
        await rig.clock.advance(5.0)
        assert task.state is S.CANCELLED and not link.delivered
    finally:
        await rig.close()


async def test_a_task_backing_off_cancelled_is_not_retried() -> None:
    rig = Rig()
    try:
        _, link = rig.agent("a", lambda w: ("fault", "boom"), idempotent=True)
        task = await rig.submit()
        assert task.state is S.RETRYING
        rig.gateway.cancel(task.task_id, "tester")
        await rig.clock.advance(5.0)
        assert task.state is S.CANCELLED and len(link.delivered) == 1
    finally:
        await rig.close()


async def test_cancelling_an_ended_task_changes_nothing() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        task = await rig.submit()
        assert task.state is S.SUCCEEDED
        assert rig.gateway.cancel(task.task_id, "tester") is None  # not live
        assert task.state is S.SUCCEEDED
        assert rig.gateway.cancel("no-such-task", "tester") is None
    finally:
        await rig.close()


async def test_an_attempt_abandoned_at_a_stop_is_not_told_to_its_agent() -> None:
    # A stopped coordinator resumes the task later and sends it back to the same agent,
    # whose key cache answers it; a cancelled run there would be forgotten and run again.
    rig = Rig()
    record, link = rig.agent("a", None)
    task = await rig.submit()
    assert task.state is S.RUNNING
    await rig.gateway.stop(0)
    assert link.cancelled == [] and record.inflight == 0
    assert not task.terminal  # it resumes on restart


async def test_a_timed_out_idempotent_attempt_is_stopped_once_its_task_ends() -> None:
    # Not at the timeout: a retry at the same agent would join that run (its key cache).
    rig = Rig()
    try:
        calls: list[int] = []

        def second_answers(work: Any) -> Any:
            calls.append(work.attempt)
            return None if work.attempt == 1 else ("ok", "second")
        _, link = rig.agent("a", second_answers, latency_ms=100, idempotent=True)
        task = await rig.submit()
        await rig.outcome(task)
        assert task.state is S.SUCCEEDED and calls == [1, 2]
        assert link.cancelled == [(task.task_id, 1)]  # told once the task had ended
    finally:
        await rig.close()


async def test_a_task_let_go_after_a_timed_out_attempt_leaves_nothing_to_stop_here() -> None:
    # Another node took the task over (a cluster's take-over): its timed-out run is the new
    # owner's to join or stop; this node neither tells the agent nor keeps the attempt.
    rig = Rig()
    try:
        seen: list[int] = []

        def never_answers(work: Any) -> Any:
            seen.append(work.attempt)
            return None
        _, link = rig.agent("a", never_answers, latency_ms=100, idempotent=True)
        task = await rig.submit()
        for _ in range(200):  # the first attempt times out, a retry runs
            if len(seen) >= 2:
                break
            await rig.clock.advance(0.05)
        assert seen[:2] == [1, 2]
        assert rig.gateway.following.let_go([task.task_id]) == 1
        assert task.task_id not in rig.gateway.dispatch.timed_out
        assert link.cancelled == []
    finally:
        await rig.close()


async def test_a_write_that_outlives_its_timeout_is_never_told_to_stop() -> None:
    # Cut in half, a write would leave half its effects: it is left to finish.
    rig = Rig()
    try:
        _, link = rig.agent("a", None, latency_ms=100)  # not idempotent
        task = await rig.submit(max_retries=0)
        await rig.outcome(task)
        assert task.state is S.DEAD and link.cancelled == []
    finally:
        await rig.close()
