"""An operator's weights and pins (reach/core/overrides.py), alone and in routing (issue 14,
item 11: "drain and reset breaker exist; add weight override and pin/unpin of an agent for a
capability")."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_routing import CAP, GOOD, NOW, agent, by_id, open_breaker

from reach.core.liveness import Liveness
from reach.core.overrides import ANY, Overrides
from reach.core.routing import Router, Saturated
from reach.errors import Unavailable


def test_a_weight_for_a_capability_beats_one_for_all_which_beats_the_declared() -> None:
    o = Overrides()
    assert o.weight(CAP, "a", 50.0) == 50.0
    o.set_weight("a", 5.0)  # every capability of a
    assert o.weight(CAP, "a", 50.0) == 5.0 and o.weight("other.cap", "a", 50.0) == 5.0
    o.set_weight("a", 200.0, CAP)
    assert o.weight(CAP, "a", 50.0) == 200.0 and o.weight("other.cap", "a", 50.0) == 5.0
    assert o.weight(CAP, "b", 50.0) == 50.0  # another agent keeps its own
    o.set_weight("a", None, CAP)
    assert o.weight(CAP, "a", 50.0) == 5.0
    o.set_weight("a", None)
    o.set_weight("a", None)  # clearing what is not there is no error
    assert o.weights == {} and o.weight(CAP, "a", 50.0) == 50.0


@pytest.mark.parametrize("bad", [0.0, -1.0, 1000.5])
def test_a_weight_outside_the_declared_range_is_refused(bad: float) -> None:
    o = Overrides()
    with pytest.raises(ValueError, match=r"weight must be in \(0, 1000\], .*drain it"):
        o.set_weight("a", bad)
    assert o.weights == {}
    o.set_weight("a", 1000.0)  # the top of the range is a weight
    o.set_weight("b", 0.5)  # and so is anything above 0
    assert o.weights == {(ANY, "a"): 1000.0, (ANY, "b"): 0.5}


def test_pins_gather_per_capability_and_unpin_one_or_all() -> None:
    o = Overrides()
    assert o.pinned(CAP) is None and o.excluded(CAP, [("id-a", "a")]) == frozenset()
    assert o.pin(CAP, "a") == {"a"}
    assert o.pin(CAP, "b") == {"a", "b"}
    assert o.pinned(CAP) == {"a", "b"} and o.pinned("other.cap") is None
    assert o.excluded(CAP, [("1", "a"), ("2", "b"), ("3", "c")]) == {"3"}
    assert o.unpin(CAP, "a") == {"b"} and o.pinned(CAP) == {"b"}
    assert o.unpin(CAP, "b") == frozenset() and o.pins == {}  # the last one unpins it
    o.pin(CAP, "a")
    o.pin(CAP, "b")
    assert o.unpin(CAP) == frozenset() and o.pinned(CAP) is None


def test_the_view_lists_weights_by_agent_and_pins_by_capability() -> None:
    o = Overrides()
    o.set_weight("b", 7.0)
    o.set_weight("a", 9.0, CAP)
    o.pin(CAP, "b")
    o.pin(CAP, "a")
    assert o.view() == {
        "weights": [{"agent": "a", "capability": CAP, "weight": 9.0},
                    {"agent": "b", "capability": None, "weight": 7.0}],
        "pins": {CAP: ["a", "b"]}}
    o.set_weight("a", 3.0, "b.cap")  # one agent's weights in capability order ("*" first)
    o.set_weight("a", 4.0)
    assert [(w["capability"], w["weight"]) for w in o.view()["weights"]
            if w["agent"] == "a"] == [(None, 4.0), ("b.cap", 3.0), (CAP, 9.0)]


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
def test_excluded_is_exactly_the_unpinned(pins: list[str]) -> None:
    o = Overrides()
    for name in pins:
        o.pin(CAP, name)
    pairs = [(f"id-{n}", n) for n in "abcd"]
    assert o.excluded(CAP, pairs) == {f"id-{n}" for n in "abcd" if n not in pins}


# ------------------------------------------------------------------ in routing

def share(router: Router, agents: dict, n: int = 400) -> Counter[str]:
    return Counter(router.pick(CAP, GOOD, "c", agents, NOW).agent_id for _ in range(n))


@pytest.mark.parametrize("strategy", ["weighted", "least_load"])
def test_a_weight_override_moves_the_pick(strategy: str) -> None:
    agents = by_id(agent("a", weight=80, inflight=1), agent("b", weight=20, inflight=1))
    router = Router(strategy=strategy, rng=random.Random(3))
    assert share(router, agents)["a"] == 400  # declared: a wins on both scores
    router.overrides.set_weight("b", 800.0, CAP)
    assert share(router, agents)["b"] == 400
    router.overrides.set_weight("b", None, CAP)
    assert share(router, agents)["a"] == 400


def test_a_pin_sends_everything_to_the_pinned_agent_and_unpin_restores_the_spread() -> None:
    agents = by_id(agent("a"), agent("b"), agent("c"))
    router = Router(rng=random.Random(5))
    router.overrides.pin(CAP, "c")
    assert share(router, agents) == {"c": 400}
    router.overrides.pin(CAP, "a")
    assert set(share(router, agents)) == {"a", "c"}
    router.overrides.unpin(CAP)
    assert set(share(router, agents)) == {"a", "b", "c"}


def test_a_pin_is_strict_a_pinned_agent_that_cannot_take_work_is_not_bypassed() -> None:
    router = Router(rng=random.Random(1))
    router.overrides.pin(CAP, "a")
    full = by_id(agent("a", inflight=4, max_concurrency=4), agent("b"))
    with pytest.raises(Saturated):  # waits for a, as a capability served by a alone would
        router.pick(CAP, GOOD, "c", full, NOW)
    down = by_id(agent("a", state=Liveness.SUSPECTED), agent("b"))
    with pytest.raises(Unavailable, match=r"pinned to a by an operator.*unpin it") as err:
        router.pick(CAP, GOOD, "c", down, NOW)
    assert err.value.details == {"capability": CAP, "pinned": ["a"]}
    router.overrides.unpin(CAP)
    assert router.pick(CAP, GOOD, "c", down, NOW).agent_id == "b"


def test_a_pinned_agent_with_an_open_breaker_still_gets_its_early_probe() -> None:
    router = Router(rng=random.Random(1))
    router.overrides.pin(CAP, "a")
    agents = by_id(agent("a", breaker=open_breaker(NOW - 60)), agent("b"))
    assert router.pick(CAP, GOOD, "c", agents, NOW).agent_id == "a"
