"""At most once on a real ``Gateway`` with fake ports (docs/protocol.md §8): work that is not
idempotent is never handed to a second agent while the first may have it, and nothing that
ran nowhere is treated as if it might have; plus the end of a task whose last write fails."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import pytest
from test_decisions import Rig, ok, outcomes, resumed

from reach.core.tasks import Outcome, Task, TaskState
from reach.errors import InvalidParams
from reach.ports import Work
from reach.testing import FakeAgentLink

S = TaskState


def silent(work: Work) -> str:
    return "silent"  # never acknowledged (the test answers, or loses the link, later)


async def lost_before_the_ack(rig: Rig, **fields: Any) -> tuple[Task, FakeAgentLink,
                                                                FakeAgentLink]:
    """Agent ``a`` (process ``a-1``) got the task, and its link went away before it
    acknowledged; agent ``b`` is free. Returns the task, ``a``'s old link and ``b``'s."""
    record, link = rig.agent("a", silent)
    record.instance = "a-1"
    task = await rig.submit(**fields)
    _, other = rig.agent("b", ok)
    link.lose()  # the connection closed: its deliveries are lost, the agent suspected
    rig.registry.disconnected(record, rig.clock.wall())
    return task, link, other


def back_as_a_1(rig: Rig, respond: Any, **link: Any) -> FakeAgentLink:
    """Process ``a-1`` reconnects (``respond``: what its new link does with work)."""
    record, again = rig.agent("a", respond, **link)
    record.instance = "a-1"
    rig.gateway.agents_changed()
    return again


async def test_a_late_ack_keeps_the_attempt_where_it_is() -> None:
    rig = Rig(ack_timeout=0.1)
    try:
        _, busy = rig.agent("a", silent, latency_ms=1000)
        task = await rig.submit(max_retries=2)
        _, idle = rig.agent("b", ok, latency_ms=1000)  # free, and a candidate from now on
        await rig.clock.advance(0.5)  # five ack timeouts
        assert idle.delivered == [] and task.state is S.DISPATCHED
        busy.pending[(task.task_id, 1)].ack()
        busy.finish(task.task_id, "ok", "once")
        await rig.clock.settle()
        assert task.state is S.SUCCEEDED and task.result == "once"
        assert outcomes(task) == [("a", Outcome.OK)] and idle.delivered == []
    finally:
        await rig.close()


async def test_an_idempotent_capability_fails_over_at_the_ack_timeout() -> None:
    rig = Rig(ack_timeout=0.1)
    try:
        rig.agent("a", silent, latency_ms=1000, idempotent=True)
        task = await rig.submit(max_retries=2)
        rig.agent("b", ok, latency_ms=1000, idempotent=True)
        done = await rig.outcome(task, within=1.0)
        assert outcomes(done) == [("a", Outcome.UNDELIVERED), ("b", Outcome.OK)]
    finally:
        await rig.close()


async def test_never_acknowledged_and_never_answered_it_times_out_and_is_not_re_sent() -> None:
    rig = Rig(ack_timeout=0.1)
    try:
        rig.agent("a", silent, latency_ms=1000)  # completion timeout 1.2 s
        task = await rig.submit(max_retries=2)
        await rig.clock.advance(1.1)
        assert not task.terminal  # the ack timeout alone ends nothing
        done = await rig.outcome(task)
        assert done.state is S.DEAD and done.error is not None
        assert done.error["code"] == "timeout"
        assert outcomes(done) == [("a", Outcome.TIMEOUT)]
    finally:
        await rig.close()


async def test_a_link_lost_before_the_ack_goes_back_to_the_same_process() -> None:
    rig = Rig()
    try:
        task, link, other = await lost_before_the_ack(rig)
        await rig.clock.advance(0.1)
        assert other.delivered == [] and not task.terminal
        again = back_as_a_1(rig, ok)
        done = await rig.outcome(task, within=1.0)
        assert done.state is S.SUCCEEDED and other.delivered == []
        assert [w.attempt for w in again.delivered] == [2]
        assert again.delivered[0].idempotency_key == link.delivered[0].idempotency_key
    finally:
        await rig.close()


async def test_sent_back_and_refused_by_a_closing_link_it_still_goes_to_that_process_alone(
) -> None:
    """The first attempt may be running at ``a``; the second, sent back there, never left
    (the reconnected link was already closing). That proof is about the second attempt only:
    the task still waits for ``a``'s process and is never handed to ``b``."""
    rig = Rig()
    try:
        task, link, other = await lost_before_the_ack(rig, max_retries=3)
        back_as_a_1(rig, ok, accepts=False)  # back, but its link refuses the work
        await rig.clock.advance(1.0)
        assert other.delivered == [] and not task.terminal
        assert outcomes(task)[-1] == ("a", Outcome.UNDELIVERED)
        again = back_as_a_1(rig, ok)  # the same process, on a working link
        done = await rig.outcome(task, within=2.0)
        assert done.state is S.SUCCEEDED and other.delivered == []
        assert again.delivered[0].idempotency_key == link.delivered[0].idempotency_key
    finally:
        await rig.close()


async def test_a_link_lost_before_the_ack_of_an_unnamed_process_ends_the_task() -> None:
    rig = Rig()
    try:
        _, link = rig.agent("a", silent)  # registered no instance
        task = await rig.submit(max_retries=3)
        _, other = rig.agent("b", ok)
        link.lose()
        done = await rig.outcome(task, within=1.0)
        assert done.state is S.DEAD and done.error is not None
        assert done.error["code"] == "unavailable"
        assert "may have started the work" in done.error["message"]
        assert other.delivered == []
    finally:
        await rig.close()


async def test_work_that_never_left_fails_over_whatever_its_capability() -> None:
    """Proof of non-delivery (the link refused the work): the other agent takes it at once,
    idempotent or not."""
    rig = Rig()
    try:
        rig.agent("a", ok, accepts=False)
        rig.agent("b", ok)
        task = await rig.submit()
        done = await rig.outcome(task)
        assert done.state is S.SUCCEEDED
        assert [agent for agent, _ in outcomes(done)][-1] == "b"
    finally:
        await rig.close()


async def test_a_peer_holder_with_no_free_slot_sends_the_task_elsewhere() -> None:
    """A holder node's ``full`` is proof the work did not run: the task goes to an agent
    with room, not back to the full one for ``recovery_grace`` (nor dead-lettered)."""
    rig = Rig()
    try:
        _, held = rig.agent("far", lambda work: ("full", None))
        far = rig.registry.by_id["id-far"]
        far.node, far.instance = "B", "far-1"
        task = await rig.submit()
        rig.agent("near", ok)
        done = await rig.outcome(task, within=1.0)
        assert done.state is S.SUCCEEDED, done.history
        assert outcomes(done)[-1] == ("near", Outcome.OK)
        assert len(held.delivered) == 1
    finally:
        await rig.close()


async def test_a_task_whose_last_write_fails_still_ends_and_leaves_nothing_live(
        caplog: Any) -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)

        def broken(task: Task) -> None:
            raise OSError("disk full")

        rig.store.update = broken  # type: ignore[method-assign]
        task = await rig.submit()
        assert task.state is S.SUCCEEDED
        assert rig.gateway.find(task.task_id) is task
        assert task.task_id not in rig.gateway.live
        assert rig.gateway.caller_live.get("tester", 0) == 0
        assert "writing the end of task" in caplog.text
    finally:
        await rig.close()


async def test_waiting_for_a_lost_agent_spends_no_hops() -> None:
    """Twenty polls while the agent is away are not twenty tries: a resumed idempotent task
    whose agent comes back late and faults still has its retry (R9)."""
    rig = Rig(recovery_grace=10.0)
    try:
        faults = {"n": 0}

        def once_faulty(work: Work) -> Any:
            faults["n"] += 1
            return ("fault", "boom") if faults["n"] == 1 else ok(work)

        a, _ = rig.agent("a", once_faulty, idempotent=True)
        a.instance = "p1"
        a.connected = False
        rig.registry.disconnected(a, rig.clock.wall())
        task = resumed(rig, a, idempotent=True)  # max_retries 2: the restart spent one
        await rig.clock.advance(9.6)  # polled every 0.5 s, and woken by each change
        back, _ = rig.agent("a", once_faulty, idempotent=True)
        back.instance = "p1"
        rig.gateway.agents_changed()
        done = await rig.outcome(task, within=5.0)
        assert done.state is S.SUCCEEDED, done.history
        assert outcomes(done) == [("a", Outcome.LOST), ("a", Outcome.FAULT), ("a", Outcome.OK)]
    finally:
        await rig.close()


async def test_a_refusal_from_the_process_that_may_have_the_work_proves_nothing_of_it() -> None:
    """The first attempt may be running at ``a``. The same process, back and shutting down,
    refuses the second (the SDK refuses before it looks in its key cache): that proves the
    second never ran there, not the first. The task is never handed to ``b``; once the
    recovery grace is over it is dead-lettered as "may have run"."""
    rig = Rig()
    try:
        task, _, other = await lost_before_the_ack(rig, max_retries=0)
        await rig.clock.advance(9.6)
        back_as_a_1(rig, lambda work: ("error", {"code": "unavailable",
                                                 "message": "shutting down"}))
        done = await rig.outcome(task, within=2.0)
        assert done.state is S.DEAD and done.error is not None
        assert "may have started the work" in done.error["message"]
        assert other.delivered == []
        assert {agent for agent, _ in outcomes(done)} == {"a"}
    finally:
        await rig.close()


async def test_a_letter_is_not_replayed_twice_at_once() -> None:
    """Two replays of one dead letter that each read it from the store hold two copies of
    it; the second is refused while the first runs, rather than a second run of the same
    task (R13)."""
    rig = Rig()
    try:
        rig.agent("a", lambda work: ("fault", "bad deploy"))
        task = await rig.submit(max_retries=0)
        assert task.state is S.DEAD
        copy = deepcopy(task)  # what a second read of the store's row gives
        rig.agent("a", lambda work: None)  # fixed: takes it, answers later
        rig.gateway.replay(task)
        with pytest.raises(InvalidParams, match="being replayed already"):
            rig.gateway.replay(copy)
        await rig.clock.settle()
        assert rig.gateway.in_flight == 1
    finally:
        await rig.close()
