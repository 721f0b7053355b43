"""Bulkheads (reach.core.bulkhead, AgentRecord.take/give, routing per capability): slow work
fills its tier's share of an agent, never the slots fast work needs (issue 13, item 3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core import bulkhead
from reach.core.agents import FULL, READY, AgentRecord, Capability, Declared, routable
from reach.core.routing import Router, Saturated
from reach.core.schemas import compile_schema
from reach.wire.protocol import CapabilitySpec

SLOW, FAST, MID = "report.build", "price.get", "stock.check"
NOW = 100.0


def spec(name: str, latency_ms: float, limit: int | None = None) -> CapabilitySpec:
    return CapabilitySpec(name=name, latency_ms=latency_ms, max_concurrency=limit)


def agent(max_concurrency: int, *specs: CapabilitySpec, agent_id: str = "a") -> AgentRecord:
    return AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                       max_concurrency=max_concurrency,
                       capabilities={s.name: Capability(s.name, s, compile_schema({}))
                                     for s in specs})


def registered(record: AgentRecord) -> dict[str, Declared]:
    """Index ``record`` as the registry does (its groups know it and it knows them)."""
    index = {}
    for cap in record.capabilities:
        declared = index[cap] = Declared(cap)
        record.groups.append(declared.join(record))
    return index


def where(index: dict[str, Declared], record: AgentRecord, cap: str) -> int:
    return next(iter(index[cap].groups.values())).where[record]


# ---------------------------------------------------------------- the rule


def test_tiers_are_cut_at_one_and_ten_seconds():
    assert [bulkhead.tier(ms) for ms in (1, 200, 1000, 1000.5, 10_000, 10_001, 4e7)] == [
        0, 0, 0, 1, 1, 2, 2]
    assert bulkhead.TIERS == ("fast", "normal", "long")
    assert bulkhead.tier(None) == 1  # no declared latency: normal (its default timeout is 30 s)


@pytest.mark.parametrize(("slots", "tiers", "limit"), [
    (8, 1, 8), (8, 2, 6), (4, 2, 3), (20, 2, 15), (20, 3, 14), (6, 3, 4), (2, 2, 1),
    (1, 2, 1), (2, 3, 1), (3, 3, 1), (12, 3, 8)])
def test_each_tier_keeps_a_reserve_for_every_other(slots, tiers, limit):
    assert bulkhead.tier_limit(slots, tiers) == limit


@given(st.integers(1, 500), st.integers(2, 3))
def test_a_tier_limit_leaves_a_slot_for_each_other_tier_when_there_are_enough(slots, tiers):
    limit = bulkhead.tier_limit(slots, tiers)
    assert 1 <= limit <= slots
    if slots >= tiers:
        assert slots - limit >= tiers - 1
        assert limit >= slots // 2  # a tier alone may still use most of the agent


def test_one_tier_and_no_declared_limit_is_one_pool():
    assert bulkhead.plan(4, {FAST: spec(FAST, 200), MID: spec(MID, 900)}) is None
    assert bulkhead.plan(4, {FAST: spec(FAST, 200, limit=4)}) is None  # (not below max)


def test_a_plan_sets_limits_for_the_tiers_in_use_and_the_declared_ones():
    plan = bulkhead.plan(8, {SLOW: spec(SLOW, 40_000), FAST: spec(FAST, 200, limit=3)})
    assert plan is not None
    assert plan.tier_of == {SLOW: 2, FAST: 0}
    assert plan.tier_limits == [6, 8, 6]  # the normal tier is unused
    assert plan.cap_limits == {FAST: 3}
    alone = bulkhead.plan(8, {FAST: spec(FAST, 200, limit=3)})
    assert alone is not None and alone.tier_limits == [8, 8, 8]


def test_room_checks_the_tier_and_the_capability():
    plan = bulkhead.plan(8, {SLOW: spec(SLOW, 40_000), FAST: spec(FAST, 200, limit=3)})
    assert plan is not None
    assert plan.room(SLOW, {SLOW: 5}, [0, 0, 5])
    assert not plan.room(SLOW, {SLOW: 6}, [0, 0, 6])
    assert plan.room(FAST, {FAST: 2}, [2, 0, 0])
    assert not plan.room(FAST, {FAST: 3}, [3, 0, 0])
    assert plan.room("other.cap", {}, [9, 9, 9])  # not declared here: nothing to check
    single = bulkhead.plan(8, {FAST: spec(FAST, 200, limit=1)})
    assert single is not None
    assert single.room(FAST, {}, [0, 0, 0]) and not single.room(FAST, {FAST: 1}, [1, 0, 0])
    assert plan.tiers({SLOW: 2, FAST: 1, "gone.cap": 4}) == [1, 0, 2]


# ---------------------------------------------------------------- records and shelves


def test_slow_calls_fill_their_share_and_the_fast_capability_stays_ready():
    record = agent(4, spec(SLOW, 40_000), spec(FAST, 200))
    index = registered(record)
    for _ in range(3):
        assert record.room(SLOW)
        record.take(SLOW)
    assert not record.room(SLOW) and record.room(FAST)
    assert where(index, record, SLOW) == FULL and where(index, record, FAST) == READY
    assert routable(record, SLOW) == FULL and routable(record) == READY
    router = Router()
    with pytest.raises(Saturated):
        router.pick(SLOW, {}, "c", index[SLOW], NOW)
    assert router.pick(FAST, {}, "c", index[FAST], NOW) is record
    record.take(FAST)  # the agent's last slot
    assert record.inflight == 4 and where(index, record, FAST) == FULL
    record.give(SLOW)
    assert where(index, record, SLOW) == READY and where(index, record, FAST) == READY
    assert record.by_cap == {SLOW: 2, FAST: 1} and record.by_tier == [1, 0, 2]
    record.give(FAST)
    assert record.by_cap == {SLOW: 2} and record.inflight == 2


def test_one_pool_counts_per_capability_without_limits():
    record = agent(2, spec(FAST, 200), spec(MID, 300))
    registered(record)
    assert record.bulk is None
    record.take(FAST)
    record.take(FAST)
    assert record.by_cap == {FAST: 2} and record.by_tier == [0, 0, 0]
    assert not record.room(MID) and routable(record, MID) == FULL
    record.give(FAST)
    record.give(FAST)
    record.give(FAST)  # one too many (a bug elsewhere) never goes below zero per capability
    assert record.by_cap == {}


def test_a_new_declaration_while_calls_run_keeps_their_counts():
    record = agent(4, spec(SLOW, 40_000), spec(FAST, 200))
    registered(record)
    record.take(SLOW)
    record.take(SLOW)
    record.take(FAST)
    # Re-registered: the slow capability is now declared fast, plus a long one.
    record.capabilities = {s.name: Capability(s.name, s, compile_schema({})) for s in (
        spec(SLOW, 500), spec(FAST, 200), spec("big.job", 60_000))}
    record.prepare()
    assert record.bulk is not None and record.by_tier == [3, 0, 0]
    record.give(SLOW)
    record.give(SLOW)
    record.give(FAST)
    assert record.by_tier == [0, 0, 0] and record.by_cap == {}
    record.prepare()  # the same declaration: nothing re-planned
    assert record.by_tier == [0, 0, 0]


def test_a_give_of_a_capability_no_longer_in_any_tier_changes_no_tier():
    record = agent(4, spec(SLOW, 40_000), spec(FAST, 200))
    registered(record)
    record.take(SLOW)
    record.capabilities = {s.name: Capability(s.name, s, compile_schema({})) for s in (
        spec(FAST, 200), spec("big.job", 60_000))}
    record.prepare()
    assert record.by_tier == [0, 0, 0]  # report.build is in no tier now
    record.take("big.job")
    record.give(SLOW)
    assert record.by_tier == [0, 0, 1] and record.inflight == 1


def test_a_declared_capability_limit_binds_below_its_tier():
    record = agent(8, spec(FAST, 200, limit=2), spec(MID, 100))
    index = registered(record)
    record.take(FAST)
    record.take(FAST)
    assert where(index, record, FAST) == FULL and where(index, record, MID) == READY
    with pytest.raises(Saturated):
        Router().pick(FAST, {}, "c", index[FAST], NOW)


def test_an_agent_with_a_half_open_breaker_is_only_a_candidate_with_room():
    from reach.core.resilience import Breaker

    breaker = Breaker()
    for _ in range(5):
        breaker.record(False, NOW - 10)
    record = agent(4, spec(SLOW, 40_000), spec(FAST, 200))
    record.breaker = breaker
    index = registered(record)
    for _ in range(3):
        record.take(SLOW)
    with pytest.raises(Saturated):  # open long enough to be probed, but no slow slot left
        Router().pick(SLOW, {}, "c", index[SLOW], NOW)
    assert Router().pick(FAST, {}, "c", index[FAST], NOW) is record


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.lists(st.tuples(st.booleans(), st.sampled_from([SLOW, FAST, MID])),
                                   max_size=40))
def test_the_counts_and_shelves_follow_every_take_and_give(slots, steps):
    record = agent(slots, spec(SLOW, 40_000), spec(FAST, 200), spec(MID, 5_000, limit=2))
    index = registered(record)
    for take, cap in steps:
        if take and record.room(cap):
            record.take(cap)
        elif not take and record.by_cap.get(cap):
            record.give(cap)
        plan = record.bulk
        assert plan is not None
        assert record.inflight == sum(record.by_cap.values()) <= slots
        assert record.by_tier == plan.tiers(record.by_cap)
        for t, used in enumerate(record.by_tier):
            assert used <= max(plan.tier_limits[t], 0)
        assert record.by_cap.get(MID, 0) <= 2
        for c in (SLOW, FAST, MID):
            assert where(index, record, c) == routable(record, c) == (
                READY if record.room(c) else FULL)
