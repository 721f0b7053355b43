"""The backlog (issue 27): an accepted task waits its turn for a free slot or a routable
agent until its deadline (else ``max_wait``), and the door refuses new submits once a
capability's backlog is full. Nothing accepted is refused later. A synchronous call
(``call=True``) keeps failing fast (tests/gateway/test_decisions.py).

A real ``Gateway`` on fakes and a ``ManualClock`` (test_decisions' rig): every wait is exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_decisions import Rig, ok

from reach.core.tasks import SubmitRequest, TaskState
from reach.errors import NoRoute, Rejected
from reach.ports import Work

S = TaskState


async def test_submits_past_every_slot_wait_their_turn_and_all_complete_by_priority() -> None:
    # "Accepted, then refused": eight submits to a 4-slot agent, four ran and four came back
    # `rejected` 200 ms later. Now the four wait, and run highest priority first.
    rig = Rig()
    try:
        _, link = rig.agent("a", None, max_concurrency=2)
        tasks = [await rig.submit(params={"n": n}, priority=p)
                 for n, p in enumerate([5, 5, 1, 9, 5, 7])]
        assert [t.state for t in tasks[:2]] == [S.RUNNING, S.RUNNING]
        assert all(t.state is S.QUEUED for t in tasks[2:])
        await rig.clock.advance(10.0)  # far past queue_wait: still waiting, none refused
        assert all(t.state is S.QUEUED for t in tasks[2:])
        ran: list[int] = []
        while len(link.delivered) > len(ran):
            work = link.delivered[len(ran)]
            ran.append(work.params["n"])
            link.finish(work.task_id, "ok", work.params)
            await rig.clock.settle()
        assert ran == [0, 1, 3, 5, 4, 2]  # 9, then 7, then 5, then 1
        assert all(t.state is S.SUCCEEDED for t in tasks)
        assert rig.gateway.metrics.snapshot()["capabilities"]["x.work"]["rejections"] == 0
        assert rig.gateway.book.backlog.tasks == {}
    finally:
        await rig.close()


async def test_a_submit_whose_deadline_passes_in_the_backlog_is_a_dead_letter() -> None:
    rig = Rig()
    try:
        rig.agent("a", lambda w: "hang", max_concurrency=1)
        await rig.submit()
        waiting = await rig.submit(timeout=2.0)
        assert waiting.state is S.QUEUED
        await rig.clock.advance(1.99)
        assert waiting.state is S.QUEUED
        await rig.clock.advance(0.01)
        assert waiting.state is S.DEAD and waiting.error is not None
        assert waiting.error["code"] == "timeout"
        assert "did not complete within 2.0s" in waiting.error["message"]
        assert "waited 2.0s in the backlog" in waiting.error["message"]
        assert waiting.task_id in rig.gateway.dead  # replayable
        assert rig.gateway.slots.waiting("x.work") == 0 and rig.gateway.book.backlog.tasks == {}
    finally:
        await rig.close()


async def test_a_submit_without_a_timeout_waits_up_to_max_wait() -> None:
    rig = Rig(max_wait=10.0)
    try:
        rig.agent("a", lambda w: "hang", max_concurrency=1)
        await rig.submit()
        waiting = await rig.submit()
        await rig.clock.advance(9.9)
        assert waiting.state is S.QUEUED
        await rig.clock.advance(0.1)
        assert waiting.state is S.DEAD and waiting.error is not None
        assert waiting.error["code"] == "timeout"
        assert "max_wait (10s)" in waiting.error["message"]
    finally:
        await rig.close()


async def test_a_submit_with_its_own_queue_wait_is_rejected_after_it() -> None:
    rig = Rig()
    try:
        rig.agent("a", lambda w: "hang", max_concurrency=1)
        await rig.submit()
        waiting = await rig.submit(queue_wait=1.0)
        await rig.clock.advance(0.99)
        assert waiting.state is S.QUEUED
        await rig.clock.advance(0.01)
        assert waiting.state is S.FAILED and waiting.error is not None
        assert waiting.error["code"] == "rejected"
    finally:
        await rig.close()


async def test_the_door_refuses_a_submit_once_the_backlog_is_full_and_stores_nothing() -> None:
    rig = Rig(max_backlog=2)
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        first = await rig.submit()
        queued = [await rig.submit(), await rig.submit()]
        assert all(t.state is S.QUEUED for t in queued)
        rows = len(rig.store.rows)
        with pytest.raises(Rejected, match=r"2 tasks waiting .*max_backlog 2") as refused:
            rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
        assert refused.value.details["backlog"] == 2 and refused.value.details["level"] == 1.0
        assert len(rig.store.rows) == rows  # refused before acceptance: nothing stored
        link.finish(first.task_id, "ok", 1)  # one leaves the backlog for the slot
        await rig.clock.settle()
        assert queued[0].state is S.RUNNING
        later = await rig.submit()
        assert later.state is S.QUEUED
    finally:
        await rig.close()


async def test_a_submit_waits_for_a_restarting_agent_and_completes() -> None:
    # "No agent right now = failure": the only agent of a capability restarting made a submit
    # fail at once with `unavailable`, though it was back two seconds later.
    rig = Rig()
    try:
        record, _ = rig.agent("a", ok)
        rig.registry.disconnected(record, rig.clock.wall())
        task = await rig.submit(params={"n": 1})
        assert task.state is S.QUEUED
        assert task.history[-1][2] == "waiting for an agent"
        await rig.clock.advance(2.0)
        assert task.state is S.QUEUED and not task.attempts
        _, link = rig.agent("a", ok)  # back: the change wakes the task at once
        await rig.clock.settle()
        assert task.state is S.SUCCEEDED and task.result == {"echo": {"n": 1}}
        assert len(task.attempts) == 1 and link.delivered
        assert not any(state == S.RETRYING.value for state, _, _ in task.history)
    finally:
        await rig.close()


async def test_a_submit_to_a_known_capability_with_no_agent_now_waits_for_one() -> None:
    rig = Rig()
    try:
        rig.gateway.known["x.work"] = {"a"}  # declared before the coordinator restarted
        task = await rig.submit(params={"n": 2})
        assert task.state is S.QUEUED
        rig.agent("a", ok)
        await rig.clock.settle()
        assert task.state is S.SUCCEEDED
    finally:
        await rig.close()


async def test_params_the_returning_agent_refuses_fail_the_waiting_task() -> None:
    # Accepted while no agent could check its params: the agent that comes back checks them.
    rig = Rig()
    try:
        rig.gateway.known["x.work"] = {"a"}
        task = await rig.submit(params={"n": "two"})
        rig.agent("a", ok, params={"type": "object", "properties": {"n": {"type": "integer"}}})
        await rig.clock.settle()
        assert task.state is S.FAILED and task.error is not None
        assert task.error["code"] == "invalid_params"
        assert rig.gateway.metrics.snapshot()["capabilities"] == {} or \
            rig.gateway.metrics.snapshot()["capabilities"]["x.work"]["rejections"] == 0
    finally:
        await rig.close()


async def test_a_submit_no_agent_takes_within_its_wait_is_dead_lettered_with_the_reason(
) -> None:
    rig = Rig(max_wait=5.0)
    try:
        record, _ = rig.agent("a", ok)
        rig.registry.disconnected(record, rig.clock.wall())
        task = await rig.submit()
        await rig.outcome(task, within=6.0)
        assert task.state is S.DEAD and task.error is not None
        assert task.error["code"] == "unavailable"
        assert "while the task waited for one" in task.error["message"]
        assert "a disconnected" in task.error["message"]
        assert not task.attempts and task.task_id in rig.gateway.dead
    finally:
        await rig.close()


async def test_a_capability_nobody_ever_declared_is_still_no_route_at_once() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        with pytest.raises(NoRoute, match="no agent declares 'x.wrok'; did you mean 'x.work'"):
            await rig.submit("x.wrok")
    finally:
        await rig.close()


async def test_the_backlog_counts_each_waiting_task_once_whatever_ends_its_wait() -> None:
    rig = Rig(max_wait=1.0)
    try:
        def hang(work: Work) -> Any:
            return "hang"
        rig.agent("a", hang, max_concurrency=1)
        await rig.submit()
        for _ in range(3):
            await rig.submit()
        assert rig.gateway.book.backlog.depth("x.work") == 3
        assert rig.gateway.book.backlog.view(rig.clock.wall())["x.work"][0] == 3
        await rig.clock.advance(1.0)  # all three wait out max_wait
        assert rig.gateway.book.backlog.tasks == {}
        assert rig.gateway.book.backlog.view(rig.clock.wall()) == {}
    finally:
        await rig.close()


async def test_the_door_refuses_once_the_longest_waiting_task_waited_past_max_backlog_age(
) -> None:
    rig = Rig(max_backlog_age=5.0)
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        first = await rig.submit()
        waiting = await rig.submit()
        await rig.clock.advance(4.0)
        assert (await rig.submit()).state is S.QUEUED  # 4 s: within the bound
        assert rig.gateway.book.backlog.view(rig.clock.wall()) == {"x.work": (2, 4.0)}
        await rig.clock.advance(1.5)
        with pytest.raises(Rejected, match=r"waiting .* for 6s, past its limit "
                                           r"\(max_backlog_age 5s\)") as refused:
            rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
        assert refused.value.details["oldest_s"] == 5.5
        link.finish(first.task_id, "ok", 1)  # the oldest gets the slot: the backlog is young
        await rig.clock.settle()
        assert waiting.state is S.RUNNING
        assert (await rig.submit()).state is S.QUEUED
    finally:
        await rig.close()


async def test_a_callers_new_task_does_not_take_the_slot_opened_for_its_own_older_one() -> None:
    # The backlog drill across a kill -9 once ran k24 before k05: a submit handled in the same
    # loop turn as the result that freed the one slot, just before it, picked after the woken
    # waiter was given that slot and before it came to take it. A caller's own work runs in
    # the order it came (at the same priority); the new one waits for the next slot.
    rig = Rig()
    try:
        _, link = rig.agent("a", None, max_concurrency=1)
        first = await rig.submit(params={"n": 0})
        second = await rig.submit(params={"n": 1})
        assert second.state is S.QUEUED
        third = asyncio.ensure_future(rig.gateway.submit(SubmitRequest("x.work", {"n": 2},
                                                                       "tester")))
        link.finish(first.task_id, "ok", {"n": 0})  # the slot opens: ``second`` is woken
        await rig.clock.settle()
        await third
        while len(link.delivered) < 3:
            work = link.delivered[-1]
            link.finish(work.task_id, "ok", work.params)
            await rig.clock.settle()
        assert [w.params["n"] for w in link.delivered] == [0, 1, 2]
    finally:
        await rig.close()
