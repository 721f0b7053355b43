"""Warm-up (reach.core.warmup and its use in routing): the ramp, thinning, and the share a
new or recovered agent gets under every strategy (issue 13, item 2)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.core import warmup
from reach.core.agents import READY, AgentRecord, Capability, Declared
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.registry import Registry
from reach.core.resilience import Breaker, BreakerState
from reach.core.routing import STRATEGIES, Router
from reach.core.schemas import compile_schema
from reach.wire.protocol import CapabilitySpec

CAP = "model.score"
NOW = 1000.0


def agent(agent_id: str, *, joined: float = -1e6, warmup_s: float | None = None,
          max_concurrency: int = 100, breaker: Breaker | None = None) -> AgentRecord:
    """An online agent that joined (registered) at ``joined``."""
    spec = CapabilitySpec(name=CAP, latency_ms=100.0, warmup_s=warmup_s)
    record = AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                         max_concurrency=max_concurrency,
                         capabilities={CAP: Capability(CAP, spec, compile_schema({}))})
    record.last_beat = record.registered_at = joined
    if breaker is not None:
        record.breaker = breaker
    return record


def shares(router: Router, declaring: Declared, now: float, n: int = 3000) -> Counter[str]:
    return Counter(router.pick(CAP, {}, "c", declaring, now).agent_id for _ in range(n))


# ---------------------------------------------------------------- the ramp


def test_the_ramp_is_linear_from_the_floor_to_one():
    assert warmup.share(0.0, 60.0) == warmup.FLOOR == 0.1
    assert warmup.share(-5.0, 60.0) == 0.1  # (a clock that went back)
    assert warmup.share(30.0, 60.0) == pytest.approx(0.55)
    assert warmup.share(15.0, 60.0) == pytest.approx(0.325)
    assert warmup.share(59.999, 60.0) < 1.0
    assert warmup.share(60.0, 60.0) == 1.0
    assert warmup.share(1e9, 60.0) == 1.0
    assert warmup.share(0.0, 0.0) == 1.0  # no warm-up declared: warm at once
    assert warmup.share(math.inf, 60.0) == 1.0  # never warmed: warm
    assert warmup.share(1.0, 4.0, floor=0.2) == pytest.approx(0.4)


@given(st.floats(-100, 200), st.floats(0, 200), st.floats(0.01, 100), st.floats(0, 1))
def test_the_ramp_never_falls_and_stays_between_the_floor_and_one(a, b, period, floor):
    lo, hi = sorted((a, b))
    assert floor <= warmup.share(lo, period, floor) <= warmup.share(hi, period, floor) <= 1.0


@given(st.lists(st.floats(0.1, 1.0), min_size=1, max_size=12), st.integers(0, 2**32))
def test_thinning_keeps_the_warmest_and_never_empties(values, seed):
    items = list(range(len(values)))
    kept = warmup.thin(items, values, random.Random(seed))
    top = max(values)
    assert kept and all(i in kept for i, s in enumerate(values) if s == top)
    assert kept == sorted(kept)  # order kept


def test_thinning_keeps_each_with_its_share_of_the_warmest():
    rng = random.Random(1)
    kept = Counter()
    for _ in range(4000):
        kept.update(warmup.thin(["warm", "half", "cold"], [0.8, 0.4, 0.08], rng))
    assert kept["warm"] == 4000
    assert kept["half"] / 4000 == pytest.approx(0.5, abs=0.03)
    assert kept["cold"] / 4000 == pytest.approx(0.1, abs=0.02)


def test_equal_shares_are_all_kept_without_drawing():
    rng = random.Random(5)
    state = rng.getstate()
    assert warmup.thin("abc", [0.3, 0.3, 0.3], rng) == ["a", "b", "c"]
    assert rng.getstate() == state


# ---------------------------------------------------------------- in routing


def test_a_new_agent_gets_a_small_share_that_grows_to_its_normal_one():
    warm, cold = agent("warm"), agent("cold", joined=NOW)
    declaring = Declared.of(CAP, {"warm": warm, "cold": cold})
    router = Router(rng=random.Random(3))
    at_start = shares(router, declaring, NOW)["cold"] / 3000
    halfway = shares(router, declaring, NOW + 30)["cold"] / 3000
    after = shares(router, declaring, NOW + 60)["cold"] / 3000
    assert at_start == pytest.approx(0.05, abs=0.02)  # half of its 10 % floor
    assert halfway == pytest.approx(0.275, abs=0.03)
    assert after == pytest.approx(0.5, abs=0.03)


def test_a_warming_agent_that_is_the_only_candidate_gets_all_the_work():
    cold = agent("cold", joined=NOW)
    declaring = Declared.of(CAP, {"cold": cold})
    assert shares(Router(), declaring, NOW, 50) == {"cold": 50}


def test_agents_warming_together_share_as_if_none_were_warming():
    a, b = agent("a", joined=NOW), agent("b", joined=NOW)
    got = shares(Router(rng=random.Random(2)), Declared.of(CAP, {"a": a, "b": b}), NOW + 1)
    assert got["a"] / 3000 == pytest.approx(0.5, abs=0.04)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_holds_a_cold_agent_to_its_warm_share(strategy):
    """The cold agent is what every strategy prefers (idle, fast) or ties with: 6 s into a
    60 s warm-up (share 0.19) it competes in about 19 % of the picks, and wins what it
    would win in those; once warm, it gets its normal share again."""
    warm, cold = agent("warm"), agent("cold", joined=NOW)
    warm.inflight = 50  # half loaded, the cold one idle
    declaring = Declared.of(CAP, {"warm": warm, "cold": cold})
    latency = {"warm": 0.1, "cold": 0.01}

    def share_at(now: float) -> float:
        router = Router(strategy=strategy, rng=random.Random(4))
        got = Counter(router.pick(CAP, {}, "c", declaring, now, latency=latency).agent_id
                      for _ in range(2000))
        return got["cold"] / 2000

    normal = {"random": 0.5, "round_robin": 0.5}.get(strategy, 1.0)
    assert share_at(NOW + 6) == pytest.approx(0.19 * normal, abs=0.04)
    assert share_at(NOW + 61) == pytest.approx(normal, abs=0.04)


def test_a_capability_may_declare_its_own_warm_up_or_none():
    quick, none = agent("quick", joined=NOW, warmup_s=2.0), agent("none", joined=NOW,
                                                                  warmup_s=0.0)
    declaring = Declared.of(CAP, {"quick": quick, "old": agent("old"), "none": none})
    assert quick.warm_span(CAP) == 2.0 and none.warm_span(CAP) == 0.0
    assert quick.warm_share(CAP, NOW + 1) == pytest.approx(0.55)
    assert none.warm_share(CAP, NOW) == 1.0
    assert agent("default", joined=NOW).warm_span(CAP) == 60.0
    assert quick.warm_span("other.cap") == 60.0  # (not declared: the agent's default)
    got = shares(Router(rng=random.Random(6)), declaring, NOW + 2.5, 3000)
    assert got["quick"] / 3000 == pytest.approx(1 / 3, abs=0.04)  # warm after its 2 s


def test_a_group_knows_until_when_its_agents_may_be_warming():
    cold = agent("cold", joined=NOW, warmup_s=5.0)
    declaring = Declared.of(CAP, {"cold": cold, "old": agent("old")})
    group = next(iter(declaring.groups.values()))
    assert group.warm_until == NOW + 5.0
    state = Router(rng=random.Random(1))
    # Past it, a pick draws no warm-up decision: a random pick past ``exact`` draws one agent.
    big = {f"a{i}": agent(f"a{i}") for i in range(40)}
    big["cold"] = cold
    fleet = Declared.of(CAP, big)
    state = Router(strategy="random", rng=random.Random(1))
    state.pick(CAP, {}, "c", fleet, NOW + 6)
    assert state.examined == 1
    state.pick(CAP, {}, "c", fleet, NOW + 1)  # warming: two drawn, so thinning has a choice
    assert state.examined == 3


def test_past_exact_a_warming_agent_is_thinned_too():
    fleet = {f"a{i}": agent(f"a{i}") for i in range(40)}
    fleet["cold"] = agent("cold", joined=NOW)
    for strategy in ("random", "weighted", "round_robin"):
        router = Router(strategy=strategy, rng=random.Random(8))
        got = shares(router, Declared.of(CAP, fleet), NOW, 8000)
        assert got["cold"] < 8000 / 41 * 0.5, (strategy, got["cold"])


def test_a_breaker_that_closes_after_being_open_starts_a_warm_up():
    breaker = Breaker()
    for _ in range(5):
        breaker.record(False, NOW - 10)
    breaker.on_dispatch(NOW - 1)
    assert breaker.state is BreakerState.HALF_OPEN
    flaky, other = agent("flaky", breaker=breaker), agent("other")
    declaring = Declared.of(CAP, {"flaky": flaky, "other": other})
    breaker.record(True, NOW)  # the probe succeeded: closed, not announced to the shelves
    router = Router(rng=random.Random(9))
    router.pick(CAP, {}, "c", declaring, NOW + 1)  # finds it closed: back, warming from now
    assert flaky.warm_from == NOW + 1
    assert flaky.view(NOW + 1)["warming"] is True
    assert shares(router, declaring, NOW + 1)["flaky"] / 3000 == pytest.approx(0.05, abs=0.02)


def test_a_breaker_found_closed_on_the_full_shelf_starts_a_warm_up_as_well():
    breaker = Breaker()
    for _ in range(5):
        breaker.record(False, NOW - 10)
    breaker.on_dispatch(NOW - 1)
    flaky = agent("flaky", breaker=breaker, max_concurrency=2)
    flaky.inflight = 2
    declaring = Declared.of(CAP, {"flaky": flaky, "other": agent("other")})
    group = next(iter(declaring.groups.values()))
    flaky.groups.append(group)  # (as the registry's records know their groups)
    breaker.record(True, NOW)
    flaky.last_beat = NOW - 0.5
    flaky.inflight = 1  # re-shelved by a slot change: no time at hand, its last beat is used
    assert flaky.warm_from == NOW - 0.5
    assert group.where[flaky] == READY


def test_coming_back_online_starts_a_warm_up_at_the_beat_that_brought_it_back():
    registry = Registry(LivenessPolicy(1.0, 2, 3), warmup=10.0)
    reg = registry.register(agent_id="a1", name="a", version="1", max_concurrency=4,
                            specs=[CapabilitySpec(name=CAP)], link=None, now=NOW)
    record = reg.record
    assert record.warmup == 10.0 and record.warm_from == NOW
    assert record.view(NOW + 5)["warm_share"] == pytest.approx(0.55)
    assert record.view(NOW + 10)["warming"] is False
    registry.sweep(NOW + 20)  # silent: suspected, then offline
    assert record.state is not Liveness.ONLINE
    registry.heartbeat(record, NOW + 21, inflight=0, queue_depth=0, load=0.0)
    assert record.state is Liveness.ONLINE and record.warm_from == NOW + 21
    group = next(iter(registry.declaring(CAP).groups.values()))
    assert group.warm_until == NOW + 31
    registry.heartbeat(record, NOW + 22, inflight=0, queue_depth=0, load=0.0)
    assert record.warm_from == NOW + 21  # a beat while online is not a recovery


def test_an_agent_heard_from_only_later_warms_from_its_first_beat():
    registry = Registry(LivenessPolicy(1.0, 2, 3), warmup=10.0)
    record = registry.register(agent_id="a1", name="a", version="1", max_concurrency=4,
                               specs=[CapabilitySpec(name=CAP)], link=None, now=NOW,
                               heard=False).record
    assert record.state is Liveness.SUSPECTED and record.warm_from == -math.inf
    registry.heartbeat(record, NOW + 3, inflight=0, queue_depth=0, load=0.0)
    assert record.warm_from == NOW + 3


def test_the_view_shows_the_least_warm_capability():
    spec_a = CapabilitySpec(name="a.run", warmup_s=10.0)
    spec_b = CapabilitySpec(name="b.run", warmup_s=40.0)
    record = AgentRecord(agent_id="x", name="x", version="1", max_concurrency=4,
                         capabilities={"a.run": Capability("a.run", spec_a, compile_schema({})),
                                       "b.run": Capability("b.run", spec_b, compile_schema({}))})
    record.warm_from = NOW
    view = record.view(NOW + 20)
    assert view["warming"] is True and view["warm_share"] == pytest.approx(0.55)
    assert record.view(NOW + 40)["warming"] is False
    assert record.view(NOW + 40)["warm_share"] == 1.0
