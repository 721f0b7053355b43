"""A coordinator restart over a real SQLite file and a real PostgreSQL database, with the gateway on fakes for agents and
time: a task running at an agent when the coordinator stopped is resumed from the store, waits
``recovery_grace`` for that agent, and — the agent never returning — runs elsewhere when its
capability is idempotent, or is dead-lettered (not run twice) when it is not."""

from __future__ import annotations

import random
from typing import Any

from reach.config import Settings
from reach.core.backoff import Backoff
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.routing import Router
from reach.core.tasks import Outcome, SubmitRequest, TaskState
from reach.gateway.gateway import Gateway
from reach.store.store import Store
from reach.testing import FakeAgentLink, ManualClock, wait_until
from reach.wire.protocol import CapabilitySpec

S = TaskState


class Coordinator:
    """A gateway over a real store file; agents are fake links, time a manual clock."""

    def __init__(self, url: str, clock: ManualClock) -> None:
        self.settings = Settings(ack_timeout=1.0, recovery_grace=2.0,
                                 backoff=Backoff(0.1, 2, 1, 0.0), retry_budget_min=100)
        self.clock = clock
        self.store = Store(url)
        self.registry = Registry(LivenessPolicy(interval=10.0))
        self.gateway = Gateway(self.settings, self.registry, Router(rng=random.Random(1)),
                               self.store, clock, random.Random(2))

    def agent(self, name: str, respond: Any, idempotent: bool) -> FakeAgentLink:
        link = FakeAgentLink(respond)
        self.registry.register(agent_id=f"id-{name}", name=name, version="1",
                               max_concurrency=4, link=link, now=self.clock.wall(),
                               specs=[CapabilitySpec(name="x.work", idempotent=idempotent)])
        return link

    async def crash(self) -> None:
        await self.gateway.stop(0)
        await self.store.close()


async def run_then_restart(url: str, idempotent: bool) -> tuple[Coordinator, str]:
    clock = ManualClock()
    first = Coordinator(url, clock)
    await first.store.open()
    hung = first.agent("gone", lambda w: "hang", idempotent)
    task, _ = await first.gateway.submit(SubmitRequest("x.work", {"n": 1}, "tester"))
    await clock.settle()
    # the invoke leaves once the attempt is committed: on PostgreSQL, from the worker thread
    await wait_until(lambda: task.state is S.RUNNING)
    await first.store.flush()
    assert task.state is S.RUNNING and len(hung.delivered) == 1
    await first.crash()  # the coordinator stops with the task running at "gone"

    second = Coordinator(url, clock)
    await second.store.open()
    [stored] = await second.store.unfinished()
    assert stored.task_id == task.task_id and stored.attempts[-1].agent == "gone"
    second.gateway.resume(stored)  # as Reach does at start
    return second, task.task_id


async def test_an_idempotent_task_whose_agent_never_returns_runs_elsewhere_after_the_grace(
        store_url: str) -> None:
    second, task_id = await run_then_restart(store_url, idempotent=True)
    try:
        other = second.agent("other", lambda w: ("ok", "done elsewhere"), True)
        task = second.gateway.find(task_id)
        assert task is not None
        await second.clock.advance(1.9)
        assert not task.terminal and not other.delivered  # waiting for "gone" to come back
        for _ in range(10):
            await second.clock.advance(0.1)
        await wait_until(lambda: task.terminal)  # (the attempt's commit, then the invoke)
        assert task.state is S.SUCCEEDED and task.result == "done elsewhere"
        assert [(a.agent, a.outcome) for a in task.attempts] == [
            ("gone", Outcome.LOST), ("other", Outcome.OK)]
        assert task.attempts[0].error == "coordinator restarted"
        await second.store.flush()
        stored = await second.store.get(task_id)
        assert stored is not None and stored.state is S.SUCCEEDED
    finally:
        await second.crash()


async def test_a_non_idempotent_task_whose_agent_never_returns_is_dead_not_run_twice(
        store_url: str) -> None:
    second, task_id = await run_then_restart(store_url, idempotent=False)
    try:
        other = second.agent("other", lambda w: ("ok", "ran twice"), False)
        task = second.gateway.find(task_id)
        assert task is not None
        for _ in range(25):
            await second.clock.advance(0.1)
        assert task.state is S.DEAD and not other.delivered
        assert task.error is not None and task.error["code"] == "unavailable"
        assert "did not come back within 2.0s" in task.error["message"]
        await second.store.flush()
        dead = await second.store.dead()
        assert [t.task_id for t in dead] == [task_id]
    finally:
        await second.crash()
