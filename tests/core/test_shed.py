"""Priority headroom in routing (reach.core.routing, issue 13 item 3): below ``shed_below`` a
pick may not take an agent's last ``1 − high_water`` of slots, and says ``shed`` when those are
all that is free."""

from __future__ import annotations

import pytest

from reach.config import Settings
from reach.core.agents import AgentRecord, Capability, Declared
from reach.core.resilience import Breaker
from reach.core.routing import Router, Saturated
from reach.core.schemas import compile_schema
from reach.errors import Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "job.run"
NOW = 100.0


def agent(agent_id: str, max_concurrency: int, inflight: int) -> AgentRecord:
    spec = CapabilitySpec(name=CAP, latency_ms=100.0)
    record = AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                         max_concurrency=max_concurrency,
                         capabilities={CAP: Capability(CAP, spec, compile_schema({}))})
    record.inflight = inflight
    return record


def pick(router: Router, *records: AgentRecord, priority: int) -> AgentRecord:
    return router.pick(CAP, {}, "c", Declared.of(CAP, {r.agent_id: r for r in records}), NOW,
                       priority=priority)


@pytest.mark.parametrize(("slots", "low_limit"), [(10, 8), (5, 4), (4, 4), (3, 3), (1, 1),
                                                  (20, 16), (7, 6)])
def test_low_priority_may_fill_an_agent_up_to_its_high_water_mark(slots, low_limit):
    router = Router()
    below = agent("a", slots, low_limit - 1)
    assert pick(router, below, priority=0) is below
    at = agent("b", slots, low_limit)
    if low_limit < slots:
        with pytest.raises(Saturated) as caught:
            pick(router, at, priority=4)
        assert caught.value.shed is True
        assert pick(router, at, priority=5) is at  # the kept headroom is for 5 and above
        assert pick(router, at, priority=9) is at
    else:  # nothing kept back: a full agent makes everyone wait, as before
        with pytest.raises(Saturated) as caught:
            pick(router, at, priority=0)
        assert caught.value.shed is False


def test_with_every_slot_taken_nobody_is_shed():
    with pytest.raises(Saturated) as caught:
        pick(Router(), agent("a", 10, 10), priority=0)
    assert caught.value.shed is False
    with pytest.raises(Saturated) as caught:
        pick(Router(), agent("a", 10, 10), priority=9)
    assert caught.value.shed is False


def test_low_priority_goes_to_an_agent_below_its_mark_when_there_is_one():
    router = Router()
    high, low = agent("high", 10, 9), agent("low", 10, 3)
    for _ in range(20):
        assert pick(router, high, low, priority=1) is low


def test_the_threshold_and_mark_are_settings():
    router = Router(high_water=0.5, shed_below=8)
    record = agent("a", 10, 5)
    with pytest.raises(Saturated):
        pick(router, record, priority=7)
    assert pick(router, record, priority=8) is record
    assert pick(Router(high_water=1.0), agent("b", 10, 9), priority=0).agent_id == "b"
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="high_water"):
            Router(high_water=bad)
    assert Settings().high_water == 0.8 and Settings().shed_below == 5
    assert Settings().warmup == 60.0
    for wrong in ({"warmup": -1.0}, {"high_water": 0.0}, {"high_water": 1.5},
                  {"shed_below": -1}, {"shed_below": 11}):
        with pytest.raises(ValueError, match="high_water"):
            Settings(**wrong)  # type: ignore[arg-type]
    Settings(high_water=1.0, shed_below=10, warmup=0.0)
    Settings(shed_below=0)


def test_a_breaker_let_through_agent_above_the_mark_is_shed_too():
    breaker = Breaker()
    for _ in range(5):
        breaker.record(False, NOW - 10)  # open since NOW - 10: may be probed now
    record = agent("a", 10, 8)
    record.breaker = breaker
    with pytest.raises(Saturated) as caught:
        pick(Router(), record, priority=1)
    assert caught.value.shed is True
    assert pick(Router(), record, priority=6) is record


def test_an_open_breaker_early_probe_is_not_about_priority():
    breaker = Breaker()
    for _ in range(5):
        breaker.record(False, NOW - 1)  # open 1 s of 5: only an early probe could reach it
    record = agent("a", 10, 0)
    record.breaker = breaker
    assert pick(Router(), record, priority=0) is record  # the early probe
    record.inflight = 10
    with pytest.raises(Unavailable):
        pick(Router(), record, priority=9)
