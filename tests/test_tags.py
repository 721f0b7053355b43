"""Routing tags: the pure matcher (reach/core/tags.py) and the router's use of it.

An agent declares ``"region=eu"`` (key and value) or ``"gpu"`` (a plain tag); a caller asks
with ``{"region": "eu"}`` (that value) or ``{"gpu": True}`` (the key, any value); every tag
asked for must match. No agent with the tags → ``NoRoute`` listing the declared ones.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.core import tags
from reach.core.agents import AgentRecord, Capability, Declared
from reach.core.resilience import Breaker
from reach.core.routing import Permissions, Router, Saturated
from reach.core.schemas import compile_schema
from reach.errors import InvalidParams, NoRoute, Unauthorized, Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "geo.lookup"
NOW = 100.0


def agent(agent_id: str, declared: list[str], *, inflight: int = 0, max_concurrency: int = 4,
          scope: str = "read", schema: dict | None = None) -> AgentRecord:
    spec = CapabilitySpec(name=CAP, tags=declared, scope=scope, params=schema or {})
    record = AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                         max_concurrency=max_concurrency,
                         capabilities={CAP: Capability(CAP, spec, compile_schema(spec.params))})
    record.inflight = inflight
    return record


def by_id(*records: AgentRecord) -> dict[str, AgentRecord]:
    return {r.agent_id: r for r in records}


def indexed(*records: AgentRecord) -> Declared:
    """The registry's index of the records (each told of its group, as the registry does)."""
    declared = Declared(CAP)
    for r in records:
        r.groups.append(declared.join(r))
    return declared


# ------------------------------------------------------------------ the matcher


def test_parse_splits_at_the_first_equals_and_keeps_plain_tags():
    assert tags.parse(["region=eu", "region=eu-west", "gpu", "a=b=c", "x="]) == {
        "region": frozenset({"eu", "eu-west"}), "gpu": frozenset(), "a": frozenset({"b=c"}),
        "x": frozenset({""})}
    assert tags.parse([]) == {}
    # a plain tag and a valued one under the same key: the key has the values
    assert tags.parse(["gpu", "gpu=a100"]) == {"gpu": frozenset({"a100"})}


@pytest.mark.parametrize("declared,wanted,expected", [
    (["region=eu"], {"region": "eu"}, True),
    (["region=eu"], {"region": "us"}, False),
    (["region=eu"], {"zone": "eu"}, False),
    (["region=eu", "region=uk"], {"region": "uk"}, True),
    (["gpu"], {"gpu": True}, True),
    (["gpu=a100"], {"gpu": True}, True),  # True: the key, with any value
    (["gpu"], {"gpu": "a100"}, False),  # a plain tag has no value to match
    ([], {"gpu": True}, False),
    (["region=eu", "gpu"], {"region": "eu", "gpu": True}, True),
    (["region=eu"], {"region": "eu", "gpu": True}, False),  # all must match
    (["region=eu", "tier=gold"], {"region": "eu"}, True),  # declaring more is fine
    (["region=EU"], {"region": "eu"}, False),  # exact: no case folding
    (["region=eu"], {}, True),
])
def test_matches(declared, wanted, expected):
    assert tags.matches(tags.parse(declared), wanted) is expected


@given(st.lists(st.text(min_size=1, max_size=8), max_size=6),
       st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: "=" not in k),
                       st.one_of(st.just(True), st.text(min_size=1, max_size=8)), max_size=4))
def test_matches_is_every_wanted_tag_found_in_the_declared_strings(declared, wanted):
    def one(key: str, value: str | bool) -> bool:
        if value is True:
            return any(t.partition("=")[0] == key for t in declared)
        return f"{key}={value}" in declared
    assert tags.matches(tags.parse(declared), wanted) is all(one(k, v) for k, v in wanted.items())


def test_check_passes_good_tags_and_treats_empty_as_none():
    assert tags.check({"region": "eu", "gpu": True}) == {"region": "eu", "gpu": True}
    assert tags.check(None) is None
    assert tags.check({}) is None
    assert tags.check({"k": "v" * 100, "x" * 100: True}) == {"k": "v" * 100, "x" * 100: True}
    many = {f"k{i}": "v" for i in range(tags.MAX_WANTED)}
    assert tags.check(many) == many


@pytest.mark.parametrize("wanted,reason", [
    (["region=eu"], "tags not an object"),
    ("region=eu", "tags not an object"),
    ({f"k{i}": "v" for i in range(17)}, "too many tags"),
    ({"": "eu"}, "bad tag key"),
    ({"x" * 101: "eu"}, "bad tag key"),
    ({"a=b": "eu"}, "bad tag key"),
    ({1: "eu"}, "bad tag key"),
    ({"region": ""}, "bad tag value"),
    ({"region": "e" * 101}, "bad tag value"),
    ({"region": False}, "bad tag value"),
    ({"region": 1}, "bad tag value"),
    ({"region": ["eu", "us"]}, "bad tag value"),
    ({"region": None}, "bad tag value"),
])
def test_check_refuses_bad_tags_with_invalid_params(wanted, reason):
    with pytest.raises(InvalidParams) as err:
        tags.check(wanted)
    assert err.value.code == "invalid_params"
    assert err.value.details["reason"] == reason


def test_check_names_the_limits_in_its_messages():
    with pytest.raises(InvalidParams, match="at most 16 tags per call, not 17"):
        tags.check({f"k{i}": "v" for i in range(17)})
    with pytest.raises(InvalidParams, match=r"tag key 'a=b' must be 1–100 characters without"):
        tags.check({"a=b": "v"})
    with pytest.raises(InvalidParams, match=r"tag 'r' must be a string of 1–100 characters or "
                                            r"true, not False"):
        tags.check({"r": False})
    with pytest.raises(InvalidParams, match="must be an object of tag → value, not list"):
        tags.check([])
    # a huge bad value is not echoed whole
    with pytest.raises(InvalidParams) as err:
        tags.check({"r": "x" * 10_000})
    assert len(err.value.message) == 300


def test_describe_writes_the_declared_form():
    assert tags.describe({"region": "eu", "gpu": True}) == "region=eu, gpu"
    assert tags.describe({}) == ""


def test_available_lists_declared_tags_of_the_asked_keys_only():
    sets = [tags.parse(["region=us", "tier=gold"]), tags.parse(["region=ap", "gpu"]),
            tags.parse(["region=us"])]
    assert tags.available(sets, {"region": "eu"}) == ["region=ap", "region=us"]
    assert tags.available(sets, {"gpu": "a100", "zone": "1"}) == ["gpu"]
    assert tags.available(sets, {"zone": "1"}) == []
    many = [tags.parse([f"region=r{i:03}" for i in range(80)])]
    shown = tags.available(many, {"region": "eu"})
    assert len(shown) == 50 and shown[0] == "region=r000"


# ------------------------------------------------------------------ the router


def test_pick_keeps_to_the_agents_declaring_the_tags():
    eu, us, plain = agent("eu", ["region=eu"]), agent("us", ["region=us"]), agent("p", [])
    router = Router(rng=random.Random(1))
    declaring = by_id(eu, us, plain)
    picks = Counter(router.pick(CAP, {}, "c", declaring, NOW, tags={"region": "eu"}).agent_id
                    for _ in range(50))
    assert picks == {"eu": 50}
    untagged = Counter(router.pick(CAP, {}, "c", declaring, NOW).agent_id for _ in range(300))
    assert set(untagged) == {"eu", "us", "p"}  # no tags: every agent is a candidate


def test_pick_with_tags_fails_over_only_within_the_tagged_set():
    eu1, eu2, us = agent("eu1", ["region=eu"]), agent("eu2", ["region=eu"]), agent("us",
                                                                                   ["region=us"])
    router = Router(rng=random.Random(2))
    declaring = by_id(eu1, eu2, us)
    assert router.pick(CAP, {}, "c", declaring, NOW, frozenset({"eu1"}),
                       tags={"region": "eu"}).agent_id == "eu2"
    with pytest.raises(Unavailable):
        router.pick(CAP, {}, "c", declaring, NOW, frozenset({"eu1", "eu2"}),
                    tags={"region": "eu"})


def test_pick_with_tags_is_saturated_when_the_tagged_agents_are_full():
    router = Router()
    declaring = by_id(agent("eu", ["region=eu"], inflight=4), agent("us", ["region=us"]))
    with pytest.raises(Saturated):
        router.pick(CAP, {}, "c", declaring, NOW, tags={"region": "eu"})
    assert router.pick(CAP, {}, "c", declaring, NOW).agent_id == "us"


def test_pick_with_tags_among_many_agents_samples_only_tagged_groups():
    # Past `exact` ready agents routing samples: a rare tag must still be found every time.
    records = [agent(f"us{i}", ["region=us"]) for i in range(200)] + [agent("eu", ["region=eu"])]
    declaring = indexed(*records)
    router = Router(rng=random.Random(3))
    assert len(declaring.groups) == 2
    for _ in range(20):
        assert router.pick(CAP, {}, "c", declaring, NOW, tags={"region": "eu"}).agent_id == "eu"
    assert router.examined <= 20 * 2  # the tagged group's one agent, not the 200


def test_admit_no_route_when_no_agent_has_the_tags():
    router = Router()
    declaring = by_id(agent("us", ["region=us"]), agent("ap", ["region=ap", "gpu"]),
                      agent("p", []))
    with pytest.raises(NoRoute) as err:
        router.admit(CAP, {}, "c", declaring, [CAP], {"region": "eu"})
    e = err.value
    assert e.code == "no_route"
    assert e.details == {"capability": CAP, "tags": {"region": "eu"},
                         "available": ["region=ap", "region=us"], "suggestions": []}
    assert "no agent declares 'geo.lookup' with tags region=eu; declared: region=ap, " \
           "region=us" in e.message
    with pytest.raises(NoRoute, match="declared: no such tag"):
        router.admit(CAP, {}, "c", declaring, [CAP], {"zone": "1"})
    router.admit(CAP, {}, "c", declaring, [CAP], {"region": "ap", "gpu": True})
    router.admit(CAP, {}, "c", declaring, [CAP], None)
    router.admit(CAP, {}, "c", declaring, [CAP], {})


def test_admit_checks_permission_before_tags_and_tags_before_params():
    schema = {"type": "object", "required": ["q"]}
    declaring = by_id(agent("w", ["region=eu"], scope="write", schema=schema),
                      agent("r", ["region=us"], schema=schema))
    reads = Router(permissions=Permissions({"c": ("scope:read",)}))
    # permitted only to the us agent's scope: asking for eu is no route among what it may use,
    # and the error lists only what it may use
    with pytest.raises(NoRoute) as err:
        reads.admit(CAP, {"q": 1}, "c", declaring, [CAP], {"region": "eu"})
    assert err.value.details["available"] == ["region=us"]
    with pytest.raises(Unauthorized):
        Router(permissions=Permissions({"c": ()})).admit(
            CAP, {}, "c", declaring, [CAP], {"region": "eu"})
    # tagged agents exist, their schema refuses the params: invalid_params, not no_route
    with pytest.raises(InvalidParams):
        reads.admit(CAP, {}, "c", declaring, [CAP], {"region": "us"})
    reads.admit(CAP, {"q": 1}, "c", declaring, [CAP], {"region": "us"})


def test_admit_checks_params_only_against_the_tagged_agents_schemas():
    strict = {"type": "object", "required": ["q"]}
    declaring = by_id(agent("eu", ["region=eu"], schema=strict), agent("us", ["region=us"]))
    router = Router()
    router.admit(CAP, {}, "c", declaring, [CAP])  # the us agent takes anything
    with pytest.raises(InvalidParams):
        router.admit(CAP, {}, "c", declaring, [CAP], {"region": "eu"})


def test_tags_are_part_of_the_group_key():
    groups = indexed(agent("a", ["region=eu"]), agent("b", ["region=eu"]),
                     agent("c", ["region=us"]), agent("d", [])).groups
    assert sorted((sorted(k[2]), g.members) for k, g in groups.items()) == [
        ([], 1), (["region=eu"], 2), (["region=us"], 1)]
    assert {tuple(sorted(g.tags)) for g in groups.values()} == {(), ("region",)}


def test_an_open_breaker_in_the_tagged_set_still_gets_its_early_probe():
    eu = agent("eu", ["region=eu"])
    b = Breaker(open_for=5.0)
    for _ in range(5):
        b.record(False, NOW - 10)
    eu.breaker = b
    router = Router()
    declaring = by_id(eu, agent("us", ["region=us"]))
    assert router.pick(CAP, {}, "c", declaring, NOW, tags={"region": "eu"}) is eu
