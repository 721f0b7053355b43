"""Routing tags in the gateway (a real ``Gateway`` on fake ports, tests/gateway/
test_decisions.py's rig): a tagged task's hedges, fail-overs and retries stay with the agents
declaring its tags, and a refusal comes before anything is stored."""

from __future__ import annotations

from typing import Any

import pytest
from test_decisions import Rig, fault, ok, outcomes

from reach.core.resilience import LatencyWindow
from reach.core.tasks import Outcome, TaskState
from reach.errors import InvalidParams, NoRoute, Unavailable
from reach.ports import Work

S = TaskState


@pytest.fixture
async def rig() -> Any:
    r = Rig()
    yield r
    await r.close()


async def test_a_hedge_goes_to_another_agent_with_the_tags_never_to_one_without(
        rig: Rig) -> None:
    n = {"calls": 0}

    def primary(work: Work) -> Any:
        n["calls"] += 1
        return ok(work) if n["calls"] <= 20 else "hang"

    a, _ = rig.agent("eu-a", primary, idempotent=True, hedge=True, weight=1000,
                     tags=["region=eu"])
    for _ in range(20):  # successes give the capability a P95
        rig.gateway.dispatch.latency.setdefault("x.work", LatencyWindow()).add(0.2)
        await rig.submit(tags={"region": "eu"})
    _, us_link = rig.agent("us", ok, idempotent=True, hedge=True, weight=1000,
                           tags=["region=us"])
    task = await rig.submit(tags={"region": "eu"})
    await rig.clock.advance(0.3)  # past the P95: no agent with the tags to hedge to
    assert task.state is S.RUNNING and not us_link.delivered
    _, eu_b_link = rig.agent("eu-b", ok, idempotent=True, hedge=True, weight=1,
                             tags=["region=eu"])
    task = await rig.submit(tags={"region": "eu"})
    await rig.clock.advance(0.2)  # the P95: the hedge goes to eu-b
    assert task.state is S.SUCCEEDED
    assert outcomes(task) == [("eu-a", Outcome.CANCELLED), ("eu-b", Outcome.OK)]
    assert not us_link.delivered and a.inflight == 1  # (the first hang still runs)


async def test_faults_fail_over_and_retry_within_the_tags(rig: Rig) -> None:
    rig.agent("eu-1", fault, idempotent=True, tags=["region=eu"], weight=1000)
    rig.agent("eu-2", fault, idempotent=True, tags=["region=eu"], weight=500)
    _, us_link = rig.agent("us", ok, idempotent=True, tags=["region=us"], weight=1)
    task = await rig.outcome(await rig.submit(tags={"region": "eu"}, max_retries=3))
    assert task.state is S.DEAD
    assert {agent for agent, _ in outcomes(task)} == {"eu-1", "eu-2"}
    assert len(task.attempts) >= 3 and not us_link.delivered
    assert task.envelope.tags == {"region": "eu"}


async def test_refusals_come_before_anything_is_stored(rig: Rig) -> None:
    rig.agent("us", ok, tags=["region=us"])
    with pytest.raises(NoRoute):
        await rig.submit(tags={"region": "eu"})
    with pytest.raises(InvalidParams):
        await rig.submit(tags={"region": False})
    assert rig.store.rows == {} and rig.gateway.live == {}


async def test_an_agent_with_the_tags_that_is_not_online_is_unavailable(rig: Rig) -> None:
    eu, _ = rig.agent("eu", ok, tags=["region=eu"])
    rig.agent("us", ok, tags=["region=us"])
    rig.registry.disconnected(eu, rig.clock.wall())
    with pytest.raises(Unavailable, match="with tags region=eu"):
        await rig.submit(tags={"region": "eu"}, call=True)
    task = await rig.submit(tags={"region": "us"})
    assert task.state is S.SUCCEEDED
