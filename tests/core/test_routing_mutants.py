"""reach.core.routing, pinned where mutation testing found it loose (issue 17).

Admission over several scopes, ``random`` really spreading picks (and ignoring weights),
past ``exact`` agents spread over several groups, the weighted default strategy (weights and
free capacity matter; idle equals tie at random), capacity edges of agents whose breaker is not
closed, and an agent found on the full shelf with a slot open (self-healing of a stale shelf).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.agents import FULL, READY, AgentRecord, Capability, Declared
from reach.core.liveness import Liveness
from reach.core.resilience import Breaker, BreakerState
from reach.core.routing import Permissions, Router, Saturated
from reach.core.schemas import compile_schema
from reach.errors import InvalidParams, Unauthorized, Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "inventory.query"
SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
STRICT = {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 2}},
          "required": ["sku"]}
GOOD = {"sku": "A-1"}
NOW = 100.0


def agent(agent_id: str, *, inflight: int = 0, max_concurrency: int = 4, weight: float = 50.0,
          scope: str = "read", schema: dict | None = None,
          breaker: Breaker | None = None) -> AgentRecord:
    spec = CapabilitySpec(name=CAP, params=SCHEMA if schema is None else schema, scope=scope,
                          weight=weight, latency_ms=100.0)
    record = AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                         max_concurrency=max_concurrency,
                         capabilities={CAP: Capability(CAP, spec, compile_schema(spec.params))})
    record.state, record.inflight = Liveness.ONLINE, inflight
    if breaker is not None:
        record.breaker = breaker
    return record


def by_id(*records: AgentRecord) -> dict[str, AgentRecord]:
    return {r.agent_id: r for r in records}


def half_open(probing: bool = False) -> Breaker:
    b = Breaker()
    for _ in range(5):
        b.record(False, NOW - 10)
    b.on_dispatch(NOW - 1)
    b.probing = probing
    assert b.state is BreakerState.HALF_OPEN
    return b


def opened(at: float) -> Breaker:
    b = Breaker()
    for _ in range(5):
        b.record(False, at)
    return b


# ------------------------------------------------------------------ admit over several scopes

def test_admit_looks_past_an_unpermitted_first_scope():
    """Issue 17 survivor 3: ``continue`` → ``break`` made this Unauthorized."""
    declaring = by_id(agent("w", scope="write"), agent("r", scope="read"))
    router = Router(permissions=Permissions({"alice": ("scope:read",)}))
    router.admit(CAP, GOOD, "alice", declaring, [CAP])  # no raise
    assert router.pick(CAP, GOOD, "alice", declaring, NOW).agent_id == "r"
    with pytest.raises(Unauthorized):
        router.admit(CAP, GOOD, "bob", declaring, [CAP])


def test_admit_keeps_looking_past_a_schema_that_refuses():
    declaring = by_id(agent("s", schema=STRICT), agent("l"))
    Router().admit(CAP, GOOD, "x", declaring, [CAP])  # the second schema accepts
    strict_only = by_id(agent("s", schema=STRICT))
    with pytest.raises(InvalidParams) as info:
        Router().admit(CAP, GOOD, "x", strict_only, [CAP])
    assert info.value.details["reason"]  # the validator's reason is kept


def test_admit_reason_comes_from_a_refusing_schema_even_when_a_later_one_is_unpermitted():
    declaring = by_id(agent("s", schema=STRICT, scope="read"), agent("o", scope="write"))
    router = Router(permissions=Permissions({"alice": ("scope:read",)}))
    with pytest.raises(InvalidParams) as info:
        router.admit(CAP, GOOD, "alice", declaring, [CAP])
    assert "params for 'inventory.query' are invalid: " in info.value.message
    assert info.value.details["reason"]


def test_admit_checks_a_shared_schema_once_and_reuses_its_verdict():
    # Two groups (scopes) with the same validator: the cached verdict must be the real one.
    validator = compile_schema(STRICT)
    records = []
    for aid, scope in (("a", "read"), ("b", "write")):
        spec = CapabilitySpec(name=CAP, params=STRICT, scope=scope, weight=1.0)
        r = AgentRecord(agent_id=aid, name=aid, version="1", max_concurrency=1,
                        capabilities={CAP: Capability(CAP, spec, validator)})
        records.append(r)
    with pytest.raises(InvalidParams):
        Router().admit(CAP, GOOD, "x", by_id(*records), [CAP])
    Router().admit(CAP, {"sku": "ok"}, "x", by_id(*records), [CAP])


# ------------------------------------------------------------------ random spreads, ignores weight

def test_random_spreads_picks_whatever_the_weights():
    """Issue 17 survivor 4: ``random`` turned weighted would always pick the heavy agent."""
    declaring = by_id(agent("heavy", weight=100.0), agent("light", weight=1.0))
    router = Router(strategy="random", rng=random.Random(11))
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(400))
    assert 140 < counts["light"] < 260  # binomial(400, 1/2): ±6 sigma


def test_random_past_exact_draws_one_and_ignores_weights():
    # Past ``exact``, random draws a single agent; drawing two and keeping the better one
    # (as weighted does) would give the heavy agent ~44 % instead of 25 %.
    declaring = by_id(agent("heavy", weight=100.0),
                      *(agent(f"l{i}", weight=1.0) for i in range(3)))
    router = Router(strategy="random", rng=random.Random(4), exact=0)
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(800))
    assert 140 < counts["heavy"] < 270


# ------------------------------------------------------------------ past exact, several groups

def schema_of(group: int) -> dict:
    """A schema of its own (so a group of its own) that accepts ``GOOD``."""
    return {**SCHEMA, "title": f"group {group}"}


def groups_of(n_groups: int, per_group: int) -> dict[str, AgentRecord]:
    return by_id(*(agent(f"g{g}-{i:02}", schema=schema_of(g))
                   for g in range(n_groups) for i in range(per_group)))


def test_round_robin_past_exact_walks_every_agent_of_every_group():
    """Issue 17 survivor 6: without ``at -= len(group.ready.items)`` the cursor never leaves
    the first group."""
    declaring = Declared.of(CAP, groups_of(3, 20))
    assert len(declaring.groups) == 3
    router = Router(strategy="round_robin")  # 60 agents > exact=32
    picks = [router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(61)]
    # The cursor walks the shelves in order from the first agent, group after group.
    order = [r.agent_id for g in declaring.groups.values() for r in g.ready.items]
    assert picks == order + order[:1]
    assert sorted(order) == sorted(declaring)


@pytest.mark.parametrize("strategy", ["random", "weighted", "least_load"])
def test_sampling_past_exact_reaches_every_group_evenly(strategy):
    declaring = Declared.of(CAP, groups_of(3, 20))
    router = Router(strategy=strategy, rng=random.Random(21))
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id[:2]
                     for _ in range(600))
    assert set(counts) == {"g0", "g1", "g2"}
    assert min(counts.values()) > 120  # 200 each expected


def test_past_exact_with_held_agents_they_are_drawn_too():
    # Half-open agents letting calls through sit in ``extra``; past exact they are drawn with
    # the ready ones (first in the index space), not forgotten.
    ready = [agent(f"r{i:02}") for i in range(4)]
    held = [agent(f"h{i}", breaker=half_open()) for i in range(4)]
    router = Router(strategy="round_robin", exact=0)
    declaring = by_id(*ready, *held)
    picks = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(16))
    assert set(picks) == set(declaring) and set(picks.values()) == {2}


def test_past_exact_excluded_agents_are_never_chosen():
    declaring = by_id(*(agent(f"a{i:02}") for i in range(10)))
    exclude = frozenset(f"a{i:02}" for i in range(9))
    for strategy in ("random", "weighted", "round_robin"):
        router = Router(strategy=strategy, rng=random.Random(2), exact=0)
        for _ in range(20):
            assert router.pick(CAP, GOOD, "x", declaring, NOW,
                               exclude=exclude).agent_id == "a09"


def test_past_exact_everyone_excluded_is_unavailable_not_a_hang():
    declaring = by_id(*(agent(f"a{i:02}") for i in range(6)))
    router = Router(strategy="random", rng=random.Random(2), exact=0)
    with pytest.raises(Unavailable):
        router.pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset(declaring))


def test_exactly_exact_agents_are_all_scored():
    # ``exact`` agents (plus the excluded) are scored one by one: the best always wins.
    best = agent("best", weight=99.0)
    others = [agent(f"o{i:02}", weight=1.0) for i in range(7)]
    router = Router(strategy="weighted", rng=random.Random(0), exact=8)
    for _ in range(30):
        assert router.pick(CAP, GOOD, "x", by_id(best, *others), NOW) is best
    excluded = agent("ex")
    router = Router(strategy="weighted", rng=random.Random(0), exact=8)
    for _ in range(30):
        assert router.pick(CAP, GOOD, "x", by_id(best, excluded, *others), NOW,
                           exclude=frozenset({"ex"})) is best


def test_one_past_exact_samples_and_the_best_can_lose_its_draw():
    best = agent("best", weight=99.0)
    others = [agent(f"o{i:02}", weight=1.0) for i in range(8)]
    router = Router(strategy="weighted", rng=random.Random(0), exact=8)
    picks = Counter(router.pick(CAP, GOOD, "x", by_id(best, *others), NOW).agent_id
                    for _ in range(100))
    assert picks["best"] < 100


def test_examined_counts_the_agents_looked_at():
    router = Router()
    router.pick(CAP, GOOD, "x", by_id(agent("a"), agent("b"), agent("c")), NOW)
    assert router.examined == 3
    router.pick(CAP, GOOD, "x", by_id(agent("a", breaker=half_open())), NOW)
    assert router.examined == 4


# ------------------------------------------------------------------ the weighted default

def test_default_strategy_is_weighted_and_weights_decide_between_idle_agents():
    router = Router(rng=random.Random(1))
    assert router.strategy == "weighted"
    declaring = by_id(agent("light", weight=10.0), agent("heavy", weight=90.0))
    assert {router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(50)} == {"heavy"}


def test_weighted_scales_weight_by_free_capacity_exactly():
    busy_heavy = agent("a", weight=60.0, inflight=1, max_concurrency=4)  # 60 × 0.75 = 45
    idle = agent("b", weight=50.0)  # 50
    router = Router(rng=random.Random(1))
    assert router.pick(CAP, GOOD, "x", by_id(busy_heavy, idle), NOW) is idle
    busy_heavier = agent("a", weight=70.0, inflight=1, max_concurrency=4)  # 52.5
    assert router.pick(CAP, GOOD, "x", by_id(busy_heavier, idle), NOW) is busy_heavier


def test_weighted_ties_between_idle_equals_are_broken_at_random():
    declaring = by_id(*(agent(f"a{i}", weight=5.0) for i in range(4)))
    router = Router(rng=random.Random(8))
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(400))
    assert set(counts) == set(declaring) and min(counts.values()) > 60


def test_least_load_and_lowest_latency_ignore_the_tie_breaker():
    a, b = agent("a"), agent("b")
    for strategy in ("least_load", "lowest_latency"):
        router = Router(strategy=strategy, rng=random.Random(3))
        assert {router.pick(CAP, GOOD, "x", by_id(a, b), NOW).agent_id
                for _ in range(20)} == {"a"}  # min() keeps the first of equals


# ------------------------------------------------------------------ breaker not closed: capacity

def test_half_open_agent_with_one_slot_left_takes_the_call():
    record = agent("h", breaker=half_open(), inflight=3, max_concurrency=4)
    assert Router().pick(CAP, GOOD, "x", by_id(record), NOW) is record


def test_half_open_agent_at_capacity_makes_the_capability_saturated():
    record = agent("h", breaker=half_open(), inflight=4, max_concurrency=4)
    with pytest.raises(Saturated):
        Router().pick(CAP, GOOD, "x", by_id(record), NOW)


def test_open_agent_at_capacity_is_no_early_probe():
    full = agent("f", breaker=opened(NOW - 2), inflight=2, max_concurrency=2)
    with pytest.raises(Unavailable):
        Router().pick(CAP, GOOD, "x", by_id(full), NOW)
    room = agent("r", breaker=opened(NOW - 1), inflight=1, max_concurrency=2)
    assert Router().pick(CAP, GOOD, "x", by_id(full, room), NOW) is room


def test_excluded_held_agents_are_not_candidates_nor_probes():
    declaring = by_id(agent("h", breaker=half_open()), agent("o", breaker=opened(NOW - 1)))
    with pytest.raises(Unavailable):
        Router().pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"h", "o"}))


def test_early_probe_prefers_the_longest_open_and_then_the_lowest_id():
    declaring = by_id(agent("b", breaker=opened(NOW - 3)), agent("a", breaker=opened(NOW - 2)),
                      agent("c", breaker=opened(NOW - 3)))
    assert Router().pick(CAP, GOOD, "x", declaring, NOW).agent_id == "b"


def test_a_breaker_closed_since_puts_the_agent_back_on_its_shelf():
    b = half_open()
    record = agent("h", breaker=b)
    declaring = Declared.of(CAP, by_id(record))
    group = next(iter(declaring.groups.values()))
    assert record in group.held
    b.record(True, NOW)  # the probe succeeded: closed, not announced to the shelves
    assert Router().pick(CAP, GOOD, "x", declaring, NOW) is record
    assert group.where[record] == READY


def test_a_breaker_opened_on_the_ready_shelf_is_moved_to_held():
    record, other = agent("a"), agent("b")
    declaring = Declared.of(CAP, by_id(record, other))
    group = next(iter(declaring.groups.values()))
    for _ in range(5):
        record.breaker.record(False, NOW)  # opened while on ``ready``
    router = Router()
    assert router.pick(CAP, GOOD, "x", declaring, NOW) is other
    assert router.examined == 2  # each looked at once, the moved one too
    for _ in range(5):
        assert Router().pick(CAP, GOOD, "x", declaring, NOW) is other
    assert record in group.held


# ------------------------------------------------------------------ a stale full shelf

def test_an_agent_whose_slot_opened_without_a_reshelve_is_found():
    """Issue 17 survivor 5: ``found.extra.append(record)`` (a full-shelf agent that has a slot
    after all). Through the Registry it is not reachable today: every change of ``inflight``
    and liveness re-shelves the agent at once, and a breaker change lands it on ``held``,
    which every pick re-checks. It is the routing's own guard against a stale shelf (here: the
    capacity raised in place), and it must hand out that agent, not Saturated."""
    record = agent("a", inflight=2, max_concurrency=2)
    declaring = Declared.of(CAP, by_id(record))
    group = next(iter(declaring.groups.values()))
    assert group.where[record] == FULL
    record.max_concurrency = 3  # not announced
    assert Router().pick(CAP, GOOD, "x", declaring, NOW) is record
    assert group.where[record] == READY


def test_a_stale_full_shelf_agent_that_is_excluded_leaves_the_capability_unavailable():
    record = agent("a", inflight=2, max_concurrency=2)
    declaring = Declared.of(CAP, by_id(record))
    record.max_concurrency = 3
    with pytest.raises(Unavailable):
        Router().pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"a"}))


def test_a_full_agent_behind_an_unfit_group_still_saturates():
    # The first group's schema refuses the params; the second group's agent is full.
    refused = agent("s", schema=STRICT)
    full = agent("f", inflight=1, max_concurrency=1)
    with pytest.raises(Saturated):
        Router().pick(CAP, GOOD, "x", by_id(refused, full), NOW)


# ------------------------------------------------------------------ property: multi-group edges

@st.composite
def fleets(draw):
    n_groups = draw(st.integers(1, 4))
    records = []
    for g in range(n_groups):
        for i in range(draw(st.integers(0, 14))):
            cap = draw(st.integers(1, 3))
            inflight = draw(st.integers(cap - 1, cap))  # the capacity edge
            kind = draw(st.sampled_from(["closed", "closed", "half", "probing", "open"]))
            breaker = {"closed": None, "half": half_open(), "probing": half_open(True),
                       "open": opened(NOW - draw(st.integers(0, 9)))}[kind]
            records.append(agent(f"g{g}-{i:02}", schema=schema_of(g), inflight=inflight,
                                 max_concurrency=cap, breaker=breaker))
    return by_id(*records)


def _takes_work(r: AgentRecord) -> bool:
    return r.inflight < r.max_concurrency and r.breaker.allows(NOW)


@settings(max_examples=150, deadline=None)
@given(fleet=fleets(), strategy=st.sampled_from(["weighted", "random", "round_robin",
                                                 "least_load"]),
       exact=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_pick_agrees_with_a_plain_reading_of_the_fleet(fleet, strategy, exact, seed):
    router = Router(strategy=strategy, rng=random.Random(seed), exact=exact)
    declaring = Declared.of(CAP, fleet)
    fit = [r for r in fleet.values() if _takes_work(r)]
    busy = [r for r in fleet.values()
            if r.breaker.allows(NOW) and r.inflight >= r.max_concurrency]
    probes = [r for r in fleet.values() if r.breaker.state is BreakerState.OPEN
              and not r.breaker.allows(NOW) and r.inflight < r.max_concurrency]
    try:
        chosen = router.pick(CAP, GOOD, "x", declaring, NOW)
    except Saturated:
        assert not fit and busy
        return
    except Unavailable:
        assert not fit and not busy and not probes
        return
    if fit:
        assert chosen in fit
    else:
        assert not busy
        best = min(probes, key=lambda r: (r.breaker.opened_at, r.agent_id))
        assert chosen is best


# ------------------------------------------------------------------ defaults

def test_saturated_says_so_and_carries_its_level():
    err = Saturated(level=0.75)
    assert str(err) == "all candidates saturated" and err.level == 0.75


def test_by_default_up_to_8_ready_agents_are_all_scored():
    # 8, not 32 (issue 26): scoring every ready agent made a pick at 32 agents cost ~300
    # Python calls more than at one; past 8, two drawn at random (the power of two choices)
    # spread load almost as well, so a pool of 32 costs what a pool of 8 does.
    best = agent("best", weight=99.0)
    router = Router(rng=random.Random(6))
    assert (router.exact, router.sample) == (8, 2)
    few = by_id(best, *(agent(f"o{i:02}", weight=1.0) for i in range(7)))  # 8 in all
    assert {router.pick(CAP, GOOD, "x", few, NOW).agent_id for _ in range(40)} == {"best"}
    many = by_id(best, *(agent(f"o{i:02}", weight=1.0) for i in range(8)))  # 9: sampled
    assert "best" in {router.pick(CAP, GOOD, "x", many, NOW).agent_id for _ in range(40)}
    assert len({router.pick(CAP, GOOD, "x", many, NOW).agent_id for _ in range(40)}) > 1


def test_by_default_two_are_drawn_past_exact():
    # One best agent among eleven: it wins when drawn, so about 1 − (10/11)² = 17 % of picks
    # with two draws (25 % with three, 9 % with one).
    declaring = by_id(agent("best", weight=99.0), *(agent(f"o{i:02}", weight=1.0)
                                                    for i in range(10)))
    router = Router(rng=random.Random(12), exact=0)
    wins = sum(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id == "best"
               for _ in range(2000))
    assert 280 < wins < 420


# ------------------------------------------------------------------ deciding Saturated cheaply

def test_one_full_agent_decides_saturated_and_the_rest_are_not_looked_at():
    declaring = by_id(*(agent(f"f{i}", inflight=1, max_concurrency=1) for i in range(5)))
    router = Router()
    with pytest.raises(Saturated):
        router.pick(CAP, GOOD, "x", declaring, NOW)
    assert router.examined == 1


def test_the_first_group_with_a_full_agent_decides_saturated():
    declaring = groups_of(3, 2)
    for record in declaring.values():
        record.inflight = 1
        record.max_concurrency = 1
    router = Router()
    with pytest.raises(Saturated):
        router.pick(CAP, GOOD, "x", Declared.of(CAP, declaring), NOW)
    assert router.examined == 1


def test_an_excluded_full_agent_does_not_decide_but_the_next_one_does():
    declaring = by_id(agent("a", inflight=1, max_concurrency=1),
                      agent("b", inflight=1, max_concurrency=1))
    router = Router()
    with pytest.raises(Saturated):
        router.pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"a"}))
    assert router.examined == 2
    with pytest.raises(Unavailable):
        router.pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"a", "b"}))


def test_held_agents_letting_calls_through_count_towards_exact():
    # 6 ready + 3 half-open letting calls through = 9 > exact=8: sampled, so the best ready
    # agent sometimes is not drawn (with 6 + 3 ≤ 8 it would win every time).
    best = agent("best", weight=99.0)
    ready = [agent(f"r{i}", weight=1.0) for i in range(5)]
    held = [agent(f"h{i}", weight=1.0, breaker=half_open()) for i in range(3)]
    router = Router(rng=random.Random(9), exact=8)
    declaring = by_id(best, *ready, *held)
    picks = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(100))
    assert 0 < picks["best"] < 100
    fewer = by_id(best, *ready, *held[:2])  # 8: every one scored
    assert {router.pick(CAP, GOOD, "x", fewer, NOW).agent_id for _ in range(30)} == {"best"}


@pytest.mark.parametrize("strategy", ["weighted", "round_robin"])
def test_past_exact_when_every_drawn_agent_turns_out_tripped_the_early_probe_is_sent(strategy):
    # The breakers opened while the agents sat on ``ready`` (not announced): each draw moves
    # one to ``held`` until no ready agent is left, then the longest open is probed early.
    records = [agent(f"a{i}") for i in range(3)]
    declaring = Declared.of(CAP, by_id(*records))
    for i, record in enumerate(records):
        for _ in range(5):
            record.breaker.record(False, NOW - 3 + i)
    chosen = Router(strategy=strategy, rng=random.Random(1), exact=0).pick(
        CAP, GOOD, "x", declaring, NOW)
    assert chosen.agent_id == "a0"
    group = next(iter(declaring.groups.values()))
    assert not group.ready.items and len(group.held.items) == 3


def test_a_group_of_excluded_full_agents_leaves_the_decision_to_the_next_group():
    first = agent("a", inflight=1, max_concurrency=1, schema=schema_of(0))
    second = agent("b", inflight=1, max_concurrency=1, schema=schema_of(1))
    declaring = Declared.of(CAP, by_id(first, second))
    assert len(declaring.groups) == 2
    with pytest.raises(Saturated):
        Router().pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"a"}))


def test_round_robin_past_exact_gives_an_excluded_agents_turn_to_the_next_one():
    declaring = Declared.of(CAP, by_id(*(agent(f"a{i}") for i in range(5))))
    router = Router(strategy="round_robin", exact=0)
    picks = [router.pick(CAP, GOOD, "x", declaring, NOW, exclude=frozenset({"a2"})).agent_id
             for _ in range(5)]
    assert picks == ["a0", "a1", "a3", "a3", "a4"]


def test_an_agent_gone_offline_without_a_reshelve_is_never_chosen():
    for seed in range(10):
        gone, other = agent("a"), agent("b")
        declaring = Declared.of(CAP, by_id(gone, other))
        group = next(iter(declaring.groups.values()))
        gone.state = Liveness.OFFLINE  # not announced to the shelves
        assert Router(rng=random.Random(seed)).pick(CAP, GOOD, "x", declaring, NOW) is other
        assert gone not in group.where


def test_lowest_latency_reads_declared_milliseconds_as_seconds():
    measured = agent("a")
    declared = agent("b")
    declared.capabilities[CAP].spec.latency_ms = 200.0
    router = Router(strategy="lowest_latency")
    # a measured 0.15 s beats b's declared 200 ms
    assert router.pick(CAP, GOOD, "x", by_id(measured, declared), NOW,
                       latency={"a": 0.15}) is measured
    assert router.pick(CAP, GOOD, "x", by_id(measured, declared), NOW,
                       latency={"a": 0.25}) is declared


def test_past_exact_two_are_drawn_among_held_agents_too():
    # Every agent is half-open and letting calls through (``extra``): the weighted draw of two
    # still applies (1 − (10/11)² ≈ 17 % for the best; 9 % with one draw).
    best = agent("best", weight=99.0, breaker=half_open())
    others = [agent(f"o{i:02}", weight=1.0, breaker=half_open()) for i in range(10)]
    router = Router(rng=random.Random(5), exact=0)
    declaring = by_id(best, *others)
    wins = sum(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id == "best"
               for _ in range(2000))
    assert 280 < wins < 420
