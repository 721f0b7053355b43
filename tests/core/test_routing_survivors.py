"""Tests that pin behaviour of reach/core/routing.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_routing_mutants import CAP, GOOD, NOW, agent, by_id, schema_of

from reach.core.agents import AgentRecord, Declared
from reach.core.routing import Router, Saturated

# ------------------------------------------------------------------ Saturated and priorities


def test_saturated_without_shed_means_wait_not_reject() -> None:
    """A plain ``Saturated`` (the driver raises one to make a newcomer yield to a waiting
    caller) means "queue and wait for a slot"; only an explicit ``shed`` rejects at once."""
    sat = Saturated(0.5)  # routing.py:71, the default of ``shed``
    assert (sat.level, sat.shed) == (0.5, False)
    assert Saturated(1.0, shed=True).shed is True


def test_a_pick_without_a_priority_counts_as_the_top_wire_priority() -> None:
    """A pick that names no priority is one of priority 9, the top of the wire's 0–9: it gets
    the headroom under the default mark, and is held to the mark like priority 9 when an
    operator sheds every priority (``shed_below=10``)."""
    record = agent("a", inflight=3, max_concurrency=4)  # 3 of 4 taken: only headroom is left
    declaring = Declared.of(CAP, by_id(record))
    assert Router().pick(CAP, GOOD, "c", declaring, NOW) is record
    router = Router(shed_below=10, high_water=0.5)
    with pytest.raises(Saturated) as caught:  # routing.py:153, priority's default
        router.pick(CAP, GOOD, "c", declaring, NOW)
    assert caught.value.shed is True
    with pytest.raises(Saturated):
        router.pick(CAP, GOOD, "c", declaring, NOW, priority=9)


def _low(router: Router, record: AgentRecord) -> AgentRecord:
    """A pick below ``shed_below`` (priority 0) of ``record`` alone."""
    return router.pick(CAP, GOOD, "c", Declared.of(CAP, by_id(record)), NOW, priority=0)


@given(slots=st.integers(1, 40), thousandths=st.integers(1, 1000))
@example(slots=25, thousandths=280).via("float noise above a whole slot")
@example(slots=4, thousandths=750).via("a whole slot exactly")
@settings(max_examples=60, deadline=None)
def test_low_priority_uses_exactly_ceil_of_slots_times_the_mark(slots: int,
                                                                thousandths: int) -> None:
    """Below ``shed_below`` a pick may fill an agent up to ceil(slots × high_water) of the mark
    the operator wrote (exact decimal arithmetic, the reference): float noise such as
    25 × 0.28 = 7.000000000000001 does not hand out an 8th slot, and the last slot under the
    mark is usable."""
    high_water = thousandths / 1000
    limit = math.ceil(Fraction(slots) * Fraction(thousandths, 1000))
    router = Router(high_water=high_water)
    under = agent("a", inflight=limit - 1, max_concurrency=slots)
    assert _low(router, under) is under
    if limit < slots:
        with pytest.raises(Saturated) as caught:
            _low(router, agent("a", inflight=limit, max_concurrency=slots))
        assert caught.value.shed is True


def test_a_mark_a_hair_above_a_whole_slot_still_rounds_up() -> None:
    """The tolerance in the mark only absorbs float rounding (~1e-15 of a slot): a mark that
    puts 3.0000000015 slots under it (a real, if tiny, fraction) still lets the 4th slot be
    used by low priorities, as ceil says."""
    router = Router(high_water=(3 + 1.5e-9) / 4)  # routing.py:345, the size of the tolerance
    record = agent("a", inflight=3, max_concurrency=4)
    assert _low(router, record) is record


# ------------------------------------------------------------------ warm-up boundaries


def test_round_robin_walks_every_agent_in_the_instant_a_warm_up_ends() -> None:
    """Round-robin past ``exact`` keeps walking every agent in turn at the very moment the last
    warm-up of the group ends (every share is 1 then: nobody is warming, so there is nothing to
    thin and only one agent is drawn per pick)."""
    records = [agent(f"a{i}") for i in range(4)]
    for record in records:
        record.last_beat = NOW - record.warmup  # came back exactly one warm-up ago
    declaring = Declared.of(CAP, by_id(*records))
    assert [g.warm_until for g in declaring.groups.values()] == [NOW]
    router = Router(strategy="round_robin", exact=0)
    picks = [router.pick(CAP, GOOD, "c", declaring, NOW).agent_id for _ in range(8)]
    assert picks == ["a0", "a1", "a2", "a3"] * 2  # routing.py:174, warm_until > now


class Draws(random.Random):
    """A random source whose ``random()`` gives the listed values, in turn (thinning reads
    only that), so which warming agent is thinned out is fixed by the test."""

    def __init__(self, *values: float) -> None:
        super().__init__(0)
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def test_a_pick_left_without_a_choice_by_warm_up_takes_no_round_robin_turn() -> None:
    """Round-robin turns count picks that had a choice: when thinning leaves only the warm
    agent (the warming one drawn out), that forced pick does not use up a turn, as a pick with
    a single candidate does not; the next picks with a choice walk the agents from the top."""
    warm, warming = agent("a"), agent("b")
    warming.last_beat = NOW - warming.warmup / 2  # back half a warm-up ago: share 0.55
    declaring = Declared.of(CAP, by_id(warm, warming))
    router = Router(strategy="round_robin", rng=Draws(0.9, 0.1, 0.1))
    picks = [router.pick(CAP, GOOD, "c", declaring, NOW).agent_id for _ in range(3)]
    assert picks == ["a", "a", "b"]  # routing.py:209: thinned to one, returned at once


# ------------------------------------------------------------------ drawing past ``exact``


def test_past_exact_low_priority_with_only_headroom_left_is_shed_not_a_hang() -> None:
    """Past ``exact`` a low-priority pick draws agents whose free slots are all headroom kept
    for higher priorities: each draw is a miss that stays on the ready shelf. After a few the
    router gives up drawing, looks at everyone and sheds the task at once; a high priority
    still gets one of those slots."""
    records = [agent(f"a{i}", inflight=4, max_concurrency=5) for i in range(6)]  # mark: 4 of 5
    declaring = Declared.of(CAP, by_id(*records))
    router = Router(exact=2, rng=random.Random(3))
    with pytest.raises(Saturated) as caught:  # routing.py:265/270, the miss count and bound
        router.pick(CAP, GOOD, "c", declaring, NOW, priority=0)
    assert caught.value.shed is True
    assert router.pick(CAP, GOOD, "c", declaring, NOW, priority=9) in records


def test_past_exact_a_pick_with_several_excluded_still_looks_at_a_handful() -> None:
    """A fail-over pick (several agents already tried, so excluded) among many agents still
    draws a couple of them instead of scoring the whole fleet: the cost of a pick does not
    grow with the fleet, excluded agents or not."""
    records = [agent(f"a{i:03}") for i in range(200)]
    declaring = Declared.of(CAP, by_id(*records))
    exclude = frozenset({"a000", "a001", "a002"})
    router = Router(rng=random.Random(5))
    for _ in range(20):
        assert router.pick(CAP, GOOD, "c", declaring, NOW, exclude=exclude).agent_id \
            not in exclude
    assert router.examined <= 20 * 6  # routing.py:270, 4 + 2 × len(exclude) misses allowed


# ------------------------------------------------------------------ strategies


def test_lowest_latency_takes_an_undeclared_unmeasured_agent_as_one_second() -> None:
    """An agent that declares no latency and has not been measured yet counts as 1 s for
    ``lowest_latency``: it wins against one measured at 1.5 s, and loses to one at 0.9 s."""
    unknown, measured = agent("u"), agent("m")
    unknown.capabilities[CAP].spec.latency_ms = None
    declaring = by_id(unknown, measured)
    router = Router(strategy="lowest_latency")
    # routing.py:299, the default of an undeclared latency
    assert router.pick(CAP, GOOD, "c", declaring, NOW, latency={"m": 1.5}) is unknown
    assert router.pick(CAP, GOOD, "c", declaring, NOW, latency={"m": 0.9}) is measured


def test_weighted_trusts_an_agent_without_a_record_like_one_with_a_clean_record() -> None:
    """The 7-day reliability factor of an agent with no record yet is 1, as for a clean one:
    a newcomer does not outrank a heavier agent with a spotless record, nor lose to a lighter
    one."""
    proven, newcomer = agent("p", weight=60.0), agent("n", weight=50.0)
    for _ in range(30):
        proven.outcome(CAP, True, NOW - 60)
    assert proven.days[CAP].trust(NOW) == 1.0
    declaring = by_id(proven, newcomer)
    router = Router(rng=random.Random(4))
    # routing.py:307, the factor of an agent without a record
    assert {router.pick(CAP, GOOD, "c", declaring, NOW).agent_id for _ in range(10)} == {"p"}
    proven.capabilities[CAP].spec.weight = 40.0
    assert {router.pick(CAP, GOOD, "c", declaring, NOW).agent_id for _ in range(10)} == {"n"}


# ------------------------------------------------------------------ a draw that finds a stale agent


class _Scripted(random.Random):
    """A source whose ``random()`` returns the given draws in order."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self._draws = list(draws)

    def random(self) -> float:
        return self._draws.pop(0)


@pytest.mark.parametrize(("second_draw", "chosen"), [(0.0, "stale"), (0.9, "other")])
def test_an_agent_found_past_its_breakers_wait_is_drawn_from_at_once(
        second_draw: float, chosen: str) -> None:
    """Past ``exact``, a drawn agent whose breaker opened without a re-shelve (and whose wait
    is over) is moved aside, and it may carry the half-open probe: the next draw of the same
    pick counts it among the candidates, beside the agents of every group, with each shelf
    counted again. Uniform over the two left: a draw under 1/2 takes the one found stale, a
    draw over it the other group's agent."""
    stale = agent("stale", schema=schema_of(0))
    other = agent("other", schema=schema_of(1))
    declaring = Declared.of(CAP, by_id(stale, other))
    assert len(declaring.groups) == 2
    for _ in range(5):
        stale.breaker.record(False, NOW - 1000)  # not announced: it still sits on ``ready``
    router = Router(strategy="random", exact=0, rng=_Scripted(0.0, second_draw))
    assert router.pick(CAP, GOOD, "x", declaring, NOW).agent_id == chosen
