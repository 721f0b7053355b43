"""Fallbacks on a real ``Gateway`` with fake ports (reach.gateway.fallback): when a plan is
followed, what each kind answers, and the paths where a fallback cannot help."""

from __future__ import annotations

from typing import Any

import pytest
from test_decisions import Rig, fault, ok, resumed

from reach.core import fallback as fb
from reach.core.tasks import SubmitRequest, TaskState
from reach.errors import Unavailable
from reach.ports import Work

S = TaskState


@pytest.fixture
async def rig() -> Any:
    r = Rig(max_retries=0)
    yield r
    await r.close()


async def test_no_agent_online_with_a_fallback_is_accepted_and_answered_at_once(
        rig: Rig) -> None:
    record, _ = rig.agent("a", ok, fallback={"value": "cached"})
    rig.registry.disconnected(record, rig.clock.wall())
    task = await rig.submit()
    assert task.state is S.SUCCEEDED and task.result == "cached"
    assert task.fallback == {"kind": "value", "reason": "unavailable"}
    assert task.attempts == []  # nothing was sent
    assert [s for s, _, _ in task.history] == ["pending", "succeeded"]
    assert rig.gateway.metrics.capabilities["x.work"].fallbacks == 1


async def test_no_agent_online_without_a_fallback_is_refused_as_before(rig: Rig) -> None:
    record, _ = rig.agent("a", ok)
    rig.registry.disconnected(record, rig.clock.wall())
    with pytest.raises(Unavailable):
        await rig.submit(call=True)  # (a submit waits for an agent: test_backlog.py)


async def test_a_resumed_task_falls_back_as_its_capability_declares(rig: Rig) -> None:
    rig.agent("a", fault, fallback={"value": 7})
    task, _ = await rig.gateway.submit(SubmitRequest("x.work", {}, "tester"))
    task.envelope.fallback = None  # as a task read back from the store has it
    await rig.outcome(task)
    assert task.state is S.SUCCEEDED and task.result == 7
    assert task.fallback == {"kind": "value", "reason": "fault"}


async def test_a_fallbacks_own_task_never_falls_back(rig: Rig) -> None:
    rig.agent("a", fault, fallback={"value": 7})
    task, _ = await rig.gateway.submit(SubmitRequest("x.work", {}, "tester"))
    task.envelope.fallback = False
    await rig.outcome(task)
    assert task.state is S.DEAD and task.fallback is None


async def test_last_good_is_remembered_from_successes_not_from_fallbacks(rig: Rig) -> None:
    up = {"ok": True}

    def flaky(work: Work) -> tuple[str, Any]:
        return ok(work) if up["ok"] else fault(work)

    rig.agent("a", flaky, fallback={"last_good": {"max_age_s": 10}}, idempotent=True)
    assert (await rig.submit(params={"n": 1})).result == {"echo": {"n": 1}}
    up["ok"] = False
    await rig.clock.advance(2.0)
    first = await rig.outcome(await rig.submit(params={"n": 1}))
    assert first.result == {"echo": {"n": 1}} and first.fallback is not None
    assert first.fallback["age_s"] == pytest.approx(2.0)
    await rig.clock.advance(3.0)
    second = await rig.outcome(await rig.submit(params={"n": 1}))
    assert second.fallback is not None
    assert second.fallback["age_s"] == pytest.approx(5.0, abs=0.2)  # not refreshed by first
    await rig.clock.advance(10.0)
    stale = await rig.outcome(await rig.submit(params={"n": 1}))
    assert stale.state is S.DEAD and stale.fallback is None  # past max_age_s


async def test_a_shared_last_good_of_a_read_serves_every_caller(rig: Rig) -> None:
    up = {"ok": True}

    def flaky(work: Work) -> tuple[str, Any]:
        return ("ok", "v1") if up["ok"] else fault(work)

    rig.agent("a", flaky, fallback={"last_good": {"max_age_s": 60, "shared": True}})
    rig.agent("w", flaky, capability="x.write", scope="write",
              fallback={"last_good": {"max_age_s": 60, "shared": True}})
    for cap in ("x.work", "x.write"):
        t, _ = await rig.gateway.submit(SubmitRequest(cap, {}, "alice"))
        await rig.outcome(t)
        assert t.result == "v1"
    up["ok"] = False
    got = {}
    for cap in ("x.work", "x.write"):
        t, _ = await rig.gateway.submit(SubmitRequest(cap, {}, "bob"))
        await rig.outcome(t)
        got[cap] = (t.state, t.result)
    assert got == {"x.work": (S.SUCCEEDED, "v1"),  # a read shares, as it declared
                   "x.write": (S.DEAD, None)}       # a write never does


async def test_a_fallback_capability_that_is_refused_leaves_the_first_error(rig: Rig) -> None:
    rig.agent("a", fault)
    task = await rig.outcome(await rig.submit(fallback={"capability": "no.such"}))
    assert task.state is S.DEAD and task.error is not None
    assert task.error["code"] == "task_failed"
    assert "'no.such' refused it: no_route" in task.error["details"]["fallback"]
    assert task.task_id in rig.gateway.dead


async def test_a_fallback_capability_gets_only_the_time_left(rig: Rig) -> None:
    rig.agent("a", lambda w: "hang", idempotent=True)
    rig.agent("b", ok, capability="y.work")
    task = await rig.outcome(await rig.submit(timeout=1.0,
                                              fallback={"capability": "y.work"}))
    assert task.state is S.DEAD and task.error is not None
    assert task.error["code"] == "timeout"
    assert task.error["details"]["fallback"] == "no time left to call 'y.work'"


async def test_a_fallback_capability_with_time_left_answers(rig: Rig) -> None:
    rig.agent("a", fault)
    _, link = rig.agent("b", ok, capability="y.work")
    task = await rig.outcome(await rig.submit(timeout=30.0, params={"q": 1},
                                              fallback={"capability": "y.work"}))
    assert task.state is S.SUCCEEDED and task.result == {"echo": {"q": 1}}
    assert task.fallback is not None and task.fallback["capability"] == "y.work"
    assert link.delivered[0].deadline_ms is not None and link.delivered[0].deadline_ms <= 30_000
    other = rig.gateway.find(task.fallback["task_id"])
    assert other is not None and other.envelope.fallback is False
    assert other.envelope.trace_id == task.envelope.trace_id


async def test_a_fallback_capability_waits_for_its_agent_as_a_submit_would(rig: Rig) -> None:
    """A task read back from the store after a restart is a submit, not a call: when it
    falls back to another capability whose agent is away, that call waits for the agent
    (as its own submit would have) instead of being refused at once."""
    a, _ = rig.agent("a", fault, fallback={"capability": "y.work"})
    a.instance = "p1"
    b, _ = rig.agent("b", ok, capability="y.work")
    rig.registry.disconnected(b, rig.clock.wall())
    task = resumed(rig, a)  # its agent faults: dead, so it falls back
    await rig.clock.advance(1.0)
    assert not task.terminal, task.history
    rig.agent("b", ok, capability="y.work")  # back under its identity
    await rig.outcome(task)
    assert task.state is S.SUCCEEDED and task.result == {"echo": {}}
    assert task.fallback is not None and task.fallback["capability"] == "y.work"


async def test_the_plan_of_a_request(rig: Rig) -> None:
    rig.agent("a", ok, fallback={"value": 1})
    declaring = rig.registry.declaring("x.work")
    plans = rig.gateway.fallbacks
    assert plans.plan(SubmitRequest("x.work"), "x.work", declaring) == fb.Plan("value", 1)
    assert plans.plan(SubmitRequest("x.work", fallback={"value": 2}), "x.work",
                      declaring) == fb.Plan("value", 2)
    assert plans.declared("z.none", {}) == (None, "read")


async def test_a_replayed_letter_does_the_work_or_stays_a_letter(rig: Rig) -> None:
    """A letter of a capability whose fallback could not help (nothing kept yet): replayed
    while the capability still fails, it stays a dead letter rather than ending in a
    fallback now that one would apply (the operator wants the work done)."""
    up = {"ok": False}

    def flaky(work: Work) -> tuple[str, Any]:
        return ok(work) if up["ok"] else fault(work)

    rig.agent("a", flaky, fallback={"last_good": {"max_age_s": 600}})
    letter = await rig.outcome(await rig.submit(params={"n": 1}))
    assert letter.state is S.DEAD
    up["ok"] = True
    assert (await rig.submit(params={"n": 1})).result == {"echo": {"n": 1}}  # now kept
    up["ok"] = False
    rig.gateway.replay(letter)
    await rig.outcome(letter)
    assert letter.state is S.DEAD and letter.fallback is None
    assert letter.task_id in rig.gateway.dead


async def test_a_task_let_go_while_its_fallback_runs_is_not_finished_here(rig: Rig) -> None:
    """Another node took the task over (``Following.let_go``) while this one followed its
    capability fallback: the fallback's answer must not end the task here, nor file it
    among this node's recent tasks (docs/lifecycle-plan.md R14)."""
    rig.agent("a", fault)
    _, other = rig.agent("b", lambda w: "hang", capability="y.work")
    task = await rig.submit(fallback={"capability": "y.work"})
    for _ in range(20):
        if other.pending:
            break
        await rig.clock.advance(0.05)
    [(fallback_id, attempt)] = other.pending  # the fallback's own task, at b
    state = task.state
    assert rig.gateway.following.let_go([task.task_id]) == 1
    other.finish(fallback_id, "ok", "from y", attempt=attempt)
    await rig.clock.settle()
    assert task.state is state and not task.terminal
    assert task.task_id not in rig.gateway.recent and task.task_id not in rig.gateway.dead
    done = await rig.gateway.task(fallback_id)  # the fallback's own task ended as usual
    assert done is not None and done.state is S.SUCCEEDED


async def test_a_task_that_ended_before_its_first_write_failed_is_neither_told_nor_kept(
        rig: Rig) -> None:
    """A task can end before its insert commits (here a fallback value, answered at once).
    When that write then fails, the task was never accepted: its watchers hear nothing, an
    awaited outcome gets the write's error, and it is not kept among the recent tasks
    (docs/lifecycle-plan.md R6)."""
    record, _ = rig.agent("a", ok, fallback={"value": "cached"})
    rig.registry.disconnected(record, rig.clock.wall())
    rig.store.fail_next = True
    admission = rig.gateway.accept(SubmitRequest("x.work", {}, "tester"))
    assert admission.task is not None and admission.commit is not None
    tid = admission.task.task_id
    told: list[Any] = []
    assert rig.gateway.watch(tid, told.append)
    outcome = rig.gateway.outcome(tid)
    assert outcome is not None
    with pytest.raises(OSError, match="disk full"):
        await admission.commit
    await rig.clock.settle()
    assert admission.task.state is S.SUCCEEDED  # it did end, in memory
    assert told == []
    with pytest.raises(OSError, match="disk full"):
        await outcome
    assert tid not in rig.gateway.recent and tid not in rig.gateway.live
    assert await rig.gateway.task(tid) is None
