"""The gateway's delivery rules, on a real ``Gateway`` with fake ports: no socket, no
database, no sleeping. Agents are ``FakeAgentLink``s, the store a ``MemoryStore``, and time a
``ManualClock`` the test moves by hand, so every timeout, backoff and breaker period is exact.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from reach.config import Settings
from reach.core.agents import AgentRecord
from reach.core.backoff import Backoff
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.resilience import BreakerState, LatencyWindow
from reach.core.routing import Router
from reach.core.tasks import Outcome, SubmitRequest, Task, TaskState
from reach.errors import ReachError
from reach.gateway.gateway import Gateway
from reach.ports import Work
from reach.testing import FakeAgentLink, ManualClock, MemoryStore
from reach.wire.protocol import CapabilitySpec

S = TaskState


class Rig:
    """A gateway on fakes, plus helpers to add agents and submit."""

    def __init__(self, **settings: Any) -> None:
        defaults: dict[str, Any] = {"ack_timeout": 1.0, "backoff": Backoff(0.1, 2, 1, 0.0),
                                    "retry_budget_min": 100}
        defaults.update(settings)
        self.settings = Settings(**defaults)
        self.clock = ManualClock()
        self.store = MemoryStore()
        self.registry = Registry(LivenessPolicy(interval=10.0),
                                 breaker_open_for=self.settings.breaker_open_for)
        self.gateway = Gateway(self.settings, self.registry, Router(rng=random.Random(1)),
                               self.store, self.clock, random.Random(2))

    def agent(self, name: str, respond: Callable[[Work], Any] | None = None, *,
              capability: str = "x.work", max_concurrency: int = 4,
              accepts: bool = True, **spec: Any) -> tuple[AgentRecord, FakeAgentLink]:
        link = FakeAgentLink(respond, accepts=accepts)
        record = self.registry.register(
            agent_id=f"id-{name}", name=name, version="1", max_concurrency=max_concurrency,
            specs=[CapabilitySpec(name=capability, **spec)], link=link,
            now=self.clock.wall()).record
        return record, link

    async def submit(self, capability: str = "x.work", **fields: Any) -> Task:
        task, _ = await self.gateway.submit(
            SubmitRequest(capability, fields.pop("params", {}), "tester", **fields))
        await self.clock.settle()
        return task

    async def outcome(self, task: Task, within: float = 60.0, step: float = 0.05) -> Task:
        """Move time in ``step``s until the task ends (at most ``within`` seconds)."""
        waited = 0.0
        while not task.terminal and waited < within:
            await self.clock.advance(step)
            waited += step
        assert task.terminal, f"still {task.state.value} after {within}s: {task.history}"
        return task

    async def close(self) -> None:
        await self.gateway.stop(0)


@pytest.fixture
async def rig() -> Any:
    r = Rig()
    yield r
    await r.close()


def ok(work: Work) -> tuple[str, Any]:
    return ("ok", {"echo": work.params})


def fault(work: Work) -> tuple[str, Any]:
    return ("fault", "boom")


def outcomes(task: Task) -> list[tuple[str, str]]:
    return [(a.agent, a.outcome) for a in task.attempts]


def retries(task: Task) -> int:
    return sum(1 for state, _, _ in task.history if state == S.RETRYING.value)


async def test_a_result_succeeds_the_task_with_one_attempt(rig: Rig) -> None:
    record, link = rig.agent("a", ok)
    task = await rig.submit(params={"n": 1})
    assert task.state is S.SUCCEEDED and task.result == {"echo": {"n": 1}}
    assert outcomes(task) == [("a", Outcome.OK)]
    assert link.delivered[0].idempotency_key.endswith(task.task_id)
    assert record.inflight == 0 and record.breaker.state is BreakerState.CLOSED


async def test_a_fault_of_an_idempotent_capability_is_retried_after_the_backoff() -> None:
    rig = Rig()
    try:
        calls: list[float] = []

        def flaky(work: Work) -> tuple[str, Any]:
            calls.append(rig.clock.now())
            return fault(work) if len(calls) == 1 else ok(work)

        rig.agent("a", flaky, idempotent=True)
        task = await rig.submit()
        assert task.state is S.RETRYING  # waits out the backoff, nothing else happens
        await rig.clock.advance(0.099)
        assert len(calls) == 1
        await rig.clock.advance(0.001)  # backoff base 0.1 s, no jitter
        assert task.state is S.SUCCEEDED
        assert calls == [0.0, pytest.approx(0.1)]
        assert outcomes(task) == [("a", Outcome.FAULT), ("a", Outcome.OK)]
    finally:
        await rig.close()


async def test_a_fault_of_a_non_idempotent_capability_is_dead_at_once(rig: Rig) -> None:
    record, _ = rig.agent("a", fault)
    rig.agent("b", ok)
    rig.registry.by_name["b"].breaker.state = BreakerState.OPEN  # only "a" is routable
    rig.registry.by_name["b"].breaker.opened_at = rig.clock.wall()
    task = await rig.submit()
    assert task.state is S.DEAD and retries(task) == 0
    assert task.error is not None and task.error["code"] == "task_failed"
    assert record.faults == 1


async def test_an_answer_is_final_and_not_the_agents_fault(rig: Rig) -> None:
    record, _ = rig.agent("a", lambda w: ("answer", "no such order"), idempotent=True)
    task = await rig.submit()
    assert task.state is S.FAILED and outcomes(task) == [("a", Outcome.ANSWER)]
    assert retries(task) == 0 and record.faults == 0
    assert list(record.breaker.outcomes) == [True]


async def test_an_unacknowledged_delivery_fails_over_at_once_without_a_retry(rig: Rig) -> None:
    rig.agent("silent", lambda w: "silent", idempotent=True)  # else the late ack is waited
    rig.agent("good", ok, idempotent=True)                     # for (test_at_most_once.py)
    rig.gateway.router.strategy = "round_robin"
    # Put the silent one first: the router picks by weight; make it the only choice first.
    good = rig.registry.by_name["good"]
    good.inflight = good.max_concurrency
    task = await rig.submit()
    assert task.state is S.DISPATCHED
    good.inflight = 0
    await rig.clock.advance(0.999)
    assert task.state is S.DISPATCHED
    await rig.clock.advance(0.001)  # the ack timeout: to the other agent, no backoff
    assert task.state is S.SUCCEEDED
    assert outcomes(task) == [("silent", Outcome.UNDELIVERED), ("good", Outcome.OK)]
    assert retries(task) == 0


async def test_a_link_that_cannot_carry_the_work_fails_over_with_no_time_passing(
        rig: Rig) -> None:
    closing, _ = rig.agent("closing", ok, accepts=False, weight=1000)
    rig.agent("open", ok, weight=1)
    task = await rig.submit()
    assert task.state is S.SUCCEEDED and rig.clock.now() == 0.0
    assert [a for a, _ in outcomes(task)][-1] == "open"
    assert retries(task) == 0


async def test_a_completion_timeout_is_retried_only_when_idempotent() -> None:
    rig = Rig(max_retries=1)
    try:
        rig.agent("slow", lambda w: "hang", latency_ms=500)  # completion timeout 0.6 s
        task = await rig.submit()
        await rig.clock.advance(0.599)
        assert task.state is S.RUNNING
        await rig.clock.advance(0.001)
        assert task.state is S.DEAD and outcomes(task) == [("slow", Outcome.TIMEOUT)]
        assert task.error is not None and task.error["code"] == "timeout"
        assert "not idempotent" in task.error["message"]
    finally:
        await rig.close()
    rig = Rig(max_retries=1)
    try:
        rig.agent("slow", lambda w: "hang", latency_ms=500, idempotent=True)
        task = await rig.outcome(await rig.submit(), step=0.01)
        assert outcomes(task) == [("slow", Outcome.TIMEOUT)] * 2 and retries(task) == 1
        # hang, 0.6 s; backoff 0.1 s; hang, 0.6 s
        assert task.updated_at - task.envelope.created_at == pytest.approx(1.3, abs=0.02)
    finally:
        await rig.close()


async def test_the_callers_short_deadline_is_not_held_against_the_agent(rig: Rig) -> None:
    record, _ = rig.agent("a", lambda w: "hang", latency_ms=1000, idempotent=True)
    task = await rig.submit(timeout=0.3)
    await rig.outcome(task, step=0.01)
    assert task.state is S.DEAD and task.error is not None
    assert task.error["code"] == "timeout"
    assert record.faults == 0 and list(record.breaker.outcomes) == []
    assert task.attempts[0].error == "the caller's deadline passed"
    assert task.updated_at - task.envelope.created_at == pytest.approx(0.3, abs=0.02)


async def test_a_lost_link_after_the_ack_is_a_fault_and_fails_over(rig: Rig) -> None:
    first, link = rig.agent("a", None, idempotent=True, weight=1000)
    rig.agent("b", ok, idempotent=True, weight=1)
    task = await rig.submit()
    assert task.state is S.RUNNING
    link.lose()
    await rig.outcome(task)
    assert outcomes(task) == [("a", Outcome.LOST), ("b", Outcome.OK)]
    assert first.faults == 1


async def test_faults_open_the_breaker_and_work_goes_elsewhere(rig: Rig) -> None:
    bad, _ = rig.agent("bad", fault, idempotent=True, weight=1000)
    good, good_link = rig.agent("good", ok, idempotent=True, weight=1)
    for _ in range(5):
        await rig.outcome(await rig.submit())
    assert bad.breaker.state is BreakerState.OPEN
    before = len(good_link.delivered)
    task = await rig.submit()
    assert task.state is S.SUCCEEDED and outcomes(task) == [("good", Outcome.OK)]
    assert len(good_link.delivered) == before + 1
    await rig.clock.advance(rig.settings.breaker_open_for)
    assert bad.breaker.allows(rig.clock.wall())  # rested: half-open lets one probe through


async def test_no_healthy_agent_waits_for_a_breaker_rather_than_dead_letter() -> None:
    rig = Rig(breaker_open_for=2.0)
    try:
        record, link = rig.agent("a", ok, idempotent=True)
        rig.gateway.dispatch.health["x.work"] = deque([True] * 20, maxlen=50)  # mostly healthy
        record.breaker.state = BreakerState.OPEN
        record.breaker.opened_at = rig.clock.wall()
        record.breaker.rested = True  # no early probe
        task = await rig.submit()
        assert not task.terminal and not link.delivered
        await rig.outcome(task, step=0.1)
        assert task.state is S.SUCCEEDED
        assert rig.clock.now() == pytest.approx(2.0, abs=0.11)
        assert retries(task) == 0
    finally:
        await rig.close()


async def test_waiting_on_a_slow_half_open_probe_is_not_cut_short_by_the_open_period() -> None:
    """A probe that takes longer than ``breaker_open_for`` (a slow agent, a loaded machine):
    the tasks behind it wait for its verdict instead of running out of breaker-wait allowance
    and being dead-lettered while the agent is in fact fine."""
    rig = Rig(breaker_open_for=0.5, max_retries=0)
    try:
        record, link = rig.agent("a", None, idempotent=True, latency_ms=60_000)
        rig.gateway.dispatch.health["x.work"] = deque([True] * 20, maxlen=50)
        record.breaker.state = BreakerState.OPEN
        record.breaker.opened_at = rig.clock.wall() - rig.settings.breaker_open_for
        probe = await rig.submit()  # rested: the one probe goes through, and is not answered
        assert probe.state is S.RUNNING and record.breaker.probing
        behind = await rig.submit()
        assert not behind.terminal and len(link.delivered) == 1
        await rig.clock.advance(2.0)  # four open periods: still waiting on the verdict
        assert not behind.terminal and len(link.delivered) == 1
        link.finish(probe.task_id, "ok", "fine")  # the verdict: closed
        await rig.clock.settle()
        assert probe.state is S.SUCCEEDED and len(link.delivered) == 2
        link.finish(behind.task_id, "ok", "fine too")
        await rig.outcome(behind)
        assert behind.state is S.SUCCEEDED and retries(behind) == 0
    finally:
        await rig.close()


async def test_a_hedged_read_sends_a_second_copy_past_the_p95_and_the_first_answer_wins(
        rig: Rig) -> None:
    slow_first = {"n": 0}

    def primary(work: Work) -> Any:
        slow_first["n"] += 1
        return ok(work) if slow_first["n"] <= 20 else "hang"

    a, a_link = rig.agent("a", primary, idempotent=True, hedge=True, weight=1000)
    for _ in range(20):  # successes at "a" give the capability a P95
        rig.gateway.dispatch.latency.setdefault("x.work", LatencyWindow()).add(0.2)
        await rig.submit()
    b, b_link = rig.agent("b", ok, idempotent=True, hedge=True, weight=1)
    task = await rig.submit()
    assert task.state is S.RUNNING and not b_link.delivered
    await rig.clock.advance(0.2)  # the P95: a hedge goes to "b", which answers at once
    assert task.state is S.SUCCEEDED
    assert outcomes(task) == [("a", Outcome.CANCELLED), ("b", Outcome.OK)]
    assert (task.task_id, 1) in a_link.cancelled  # the loser's link was told
    assert a.inflight == 0 and b.inflight == 0


async def test_a_spent_retry_budget_dead_letters_instead_of_retrying() -> None:
    rig = Rig(retry_budget=0.0, retry_budget_min=0)
    try:
        rig.agent("a", fault, idempotent=True)
        task = await rig.outcome(await rig.submit())
        assert task.state is S.DEAD and len(task.attempts) == 1
        assert task.error is not None and "retry budget" in task.error["message"]
    finally:
        await rig.close()


async def test_a_saturated_agent_queues_a_call_then_rejects_after_queue_wait(rig: Rig) -> None:
    _, link = rig.agent("a", lambda w: "hang", max_concurrency=1)
    first = await rig.submit()
    second = await rig.submit(call=True)
    assert first.state is S.RUNNING and second.state is S.QUEUED
    await rig.clock.advance(0.199)
    assert second.state is S.QUEUED
    await rig.clock.advance(0.001)  # queue_wait 0.2 s
    assert second.state is S.FAILED and second.error is not None
    assert second.error["code"] == "rejected"
    assert rig.gateway.metrics.snapshot()["capabilities"]["x.work"]["rejections"] == 1


async def test_a_freed_slot_dispatches_the_queued_task(rig: Rig) -> None:
    _, link = rig.agent("a", None, max_concurrency=1)
    first = await rig.submit()
    second = await rig.submit()
    assert second.state is S.QUEUED
    link.finish(first.task_id, "ok", 1)
    await rig.clock.settle()
    assert first.state is S.SUCCEEDED and second.state is S.RUNNING
    assert rig.clock.now() == 0.0


async def test_a_task_times_out_as_a_whole_across_retries() -> None:
    rig = Rig(max_retries=50)
    try:
        rig.agent("a", fault, idempotent=True)
        task = await rig.outcome(await rig.submit(timeout=1.0), step=0.01)
        assert task.state is S.DEAD and task.error is not None
        assert task.error["code"] == "timeout"
        assert task.updated_at - task.envelope.created_at == pytest.approx(1.0, abs=0.02)
    finally:
        await rig.close()


async def test_a_failed_first_commit_leaves_nothing_behind(rig: Rig) -> None:
    rig.agent("a", None)
    rig.store.fail_next = True
    with pytest.raises(OSError):
        await rig.gateway.submit(SubmitRequest("x.work", {}, "tester", idempotency_key="k"))
    await rig.clock.settle()
    assert not rig.gateway.live and not rig.gateway.keys and not rig.gateway.caller_live


# ---------------------------------------------------------------- after a restart


def resumed(rig: Rig, agent: AgentRecord, *, idempotent: bool = False,
            instance: str | None = "p1") -> Task:
    """A task the store says was running at ``agent`` when the coordinator stopped."""
    from reach.core.tasks import Attempt, Envelope, new_task
    now = rig.clock.wall()
    task = new_task(Envelope(task_id="t-crash", trace_id="tr-crash", capability="x.work",
                             params={}, caller="tester", idempotency_key="tester/k",
                             created_at=now), now)
    task.attempts.append(Attempt(1, agent.agent_id, agent.name, now, instance=instance))
    rig.gateway.resume(task)
    return task


async def test_a_submit_waits_for_its_agent_to_come_back_where_a_call_fails_at_once() -> None:
    """A plain submit (``SubmitRequest`` without ``call``) made while the capability's only
    agent is away is accepted and waits for it; a call in the same moment is refused at once
    (it asked for an answer, not a place in line), and the submit runs once the agent is
    back."""
    rig = Rig()
    try:
        a, _ = rig.agent("a", ok)
        rig.registry.disconnected(a, rig.clock.wall())
        with pytest.raises(ReachError) as refused:
            await rig.submit(call=True)
        assert refused.value.code == "unavailable", refused.value
        task = await rig.submit()
        await rig.clock.advance(1.0)
        assert not task.terminal and not task.attempts
        rig.agent("a", ok)  # back under its identity
        await rig.clock.advance(0.5)
        assert task.state is S.SUCCEEDED and outcomes(task) == [("a", Outcome.OK)]
    finally:
        await rig.close()


async def test_a_resumed_task_goes_back_to_the_agent_that_was_running_it(rig: Rig) -> None:
    a, a_link = rig.agent("a", ok, weight=1)
    rig.agent("b", ok, weight=1000)  # the router would pick "b"
    a.instance = "p1"
    task = resumed(rig, a)
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED
    assert outcomes(task) == [("a", Outcome.LOST), ("a", Outcome.OK)]
    assert a_link.delivered[0].attempt == 2


async def test_a_resumed_task_waits_for_its_agent_within_the_recovery_grace() -> None:
    rig = Rig(recovery_grace=2.0)
    try:
        a, _ = rig.agent("a", ok)
        a.connected = False  # not back yet
        rig.registry.disconnected(a, rig.clock.wall())
        task = resumed(rig, a, instance=None)
        await rig.clock.advance(1.0)
        assert not task.terminal
        rig.agent("a", ok)  # it reconnects under its identity
        await rig.clock.advance(0.5)
        assert task.state is S.SUCCEEDED and outcomes(task)[-1] == ("a", Outcome.OK)
    finally:
        await rig.close()


async def test_a_non_idempotent_task_whose_agent_restarted_is_dead_not_run_twice(
        rig: Rig) -> None:
    a, link = rig.agent("a", ok)
    a.instance = "p2"  # back under its name, as a new process
    task = resumed(rig, a, instance="p1")
    await rig.clock.settle()
    assert task.state is S.DEAD and not link.delivered
    assert task.error is not None and "restarted" in task.error["message"]


async def test_an_idempotent_task_whose_agent_never_came_back_runs_elsewhere() -> None:
    rig = Rig(recovery_grace=1.0)
    try:
        gone, _ = rig.agent("gone", ok, idempotent=True)
        rig.registry.disconnected(gone, rig.clock.wall())
        _, other = rig.agent("other", ok, idempotent=True)
        task = resumed(rig, gone, idempotent=True, instance=None)
        await rig.clock.advance(0.9)
        assert not task.terminal and not other.delivered
        await rig.outcome(task, step=0.1)
        assert task.state is S.SUCCEEDED and outcomes(task)[-1] == ("other", Outcome.OK)
    finally:
        await rig.close()


# ---------------------------------------------------------------- keys, replay, streams, stop


async def test_a_repeated_key_returns_the_first_task(rig: Rig) -> None:
    _, link = rig.agent("a", ok)
    first = await rig.submit(idempotency_key="k1", params={"n": 1})
    again, duplicate = await rig.gateway.submit(
        SubmitRequest("x.work", {"n": 2}, "tester", idempotency_key="k1"))
    assert duplicate and again is first and len(link.delivered) == 1
    other, duplicate = await rig.gateway.submit(  # another caller's key is its own
        SubmitRequest("x.work", {"n": 3}, "someone-else", idempotency_key="k1"))
    assert not duplicate and other is not first


async def test_a_replayed_dead_letter_runs_again_and_leaves_the_list(rig: Rig) -> None:
    results = iter([("fault", "down"), ("ok", "fixed")])
    rig.agent("a", lambda w: next(results))
    task = await rig.submit()
    assert task.state is S.DEAD and task.task_id in rig.gateway.dead
    rig.gateway.replay(task)
    await rig.clock.settle()
    assert task.state is S.SUCCEEDED and task.result == "fixed"
    assert task.task_id not in rig.gateway.dead


async def test_chunks_of_a_retried_attempt_are_not_sent_twice() -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", None, idempotent=True)
        got: list[tuple[int, Any]] = []
        admission = rig.gateway.accept(SubmitRequest("x.work", {}, "tester"),
                                       lambda tid, seq, data: got.append((seq, data)))
        task = admission.task
        assert task is not None
        await rig.clock.settle()
        reply = link.pending[(task.task_id, 1)]
        reply.chunk(0, "a")
        reply.chunk(1, "b")
        link.finish(task.task_id, "fault", "mid-stream")
        await rig.clock.advance(0.1)  # the backoff; attempt 2 streams from 0 again
        reply = link.pending[(task.task_id, 2)]
        for seq, data in enumerate("abc"):
            reply.chunk(seq, data)
        link.finish(task.task_id, "ok", "done")
        await rig.clock.settle()
        assert got == [(0, "a"), (1, "b"), (2, "c")] and task.result == "done"
    finally:
        await rig.close()


async def test_a_draining_agent_gets_no_new_work(rig: Rig) -> None:
    a, a_link = rig.agent("a", ok, weight=1000)
    _, b_link = rig.agent("b", ok, weight=1)
    rig.registry.deregister(a, rig.clock.wall())
    task = await rig.submit()
    assert task.state is S.SUCCEEDED and not a_link.delivered and b_link.delivered


async def test_stop_leaves_running_tasks_unfinished_and_tells_their_waiters() -> None:
    rig = Rig()
    rig.agent("a", lambda w: "hang")
    task = await rig.submit()
    waiter = rig.gateway.outcome(task.task_id)
    assert waiter is not None and task.state is S.RUNNING
    await rig.gateway.stop(0)
    assert not task.terminal  # resumed at the next start, not dead-lettered
    assert waiter.done() and waiter.exception() is not None
    assert rig.clock.pending() == 0  # its attempt's timers went with it
