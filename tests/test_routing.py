"""Routing (reach/routing.py): admission, candidate filtering, strategies and permissions."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.agents import AgentRecord, Capability
from reach.core.liveness import Liveness
from reach.core.resilience import Breaker, BreakerState
from reach.core.routing import STRATEGIES, Permissions, Router, Saturated
from reach.core.schemas import compile_schema
from reach.errors import InvalidParams, NoRoute, Unauthorized, Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "inventory.query"
SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
GOOD = {"sku": "A-1"}
NOW = 100.0


def agent(agent_id: str, *, state: Liveness = Liveness.ONLINE, connected: bool = True,
          inflight: int = 0, max_concurrency: int = 4, weight: float = 50.0,
          latency_ms: float = 1000.0, scope: str = "read", schema: dict | None = None,
          breaker: Breaker | None = None, cap: str = CAP) -> AgentRecord:
    spec = CapabilitySpec(name=cap, params=SCHEMA if schema is None else schema, scope=scope,
                          weight=weight, latency_ms=latency_ms)
    record = AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                         max_concurrency=max_concurrency,
                         capabilities={cap: Capability(cap, spec, compile_schema(spec.params))})
    record.state, record.connected, record.inflight = state, connected, inflight
    if breaker is not None:
        record.breaker = breaker
    return record


def by_id(*records: AgentRecord) -> dict[str, AgentRecord]:
    return {r.agent_id: r for r in records}


def open_breaker(at: float = NOW) -> Breaker:
    b = Breaker(open_for=5.0)
    for _ in range(5):
        b.record(False, at)
    assert b.state is BreakerState.OPEN
    return b


def probing_breaker() -> Breaker:
    b = open_breaker(at=NOW - 10)
    b.on_dispatch(NOW - 1)
    assert b.state is BreakerState.HALF_OPEN and b.probing
    return b


# ------------------------------------------------------------------ construction

def test_unknown_strategy_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown strategy 'fastest'"):
        Router(strategy="fastest")


def test_strategies_list():
    assert STRATEGIES == ("weighted", "least_load", "lowest_latency", "round_robin", "random")


# ------------------------------------------------------------------ admit

def test_admit_no_route_with_suggestions():
    router = Router()
    with pytest.raises(NoRoute) as info:
        router.admit("sales.querry", GOOD, "alice", {}, ["sales.query", "hr.hire", "sales.list"])
    err = info.value
    assert err.code == "no_route"
    assert err.suggestions[0] == "sales.query"
    assert "hr.hire" not in err.suggestions
    assert err.details["capability"] == "sales.querry"
    assert "no agent declares 'sales.querry'" in err.message


def test_admit_invalid_params_explains_why():
    router = Router()
    with pytest.raises(InvalidParams) as info:
        router.admit(CAP, {"qty": 1}, "alice", by_id(agent("a")), [CAP])
    err = info.value
    assert "sku" in err.details["reason"]
    assert err.details["capability"] == CAP
    assert err.message.startswith(f"params for {CAP!r} are invalid: ")


def test_admit_passes_when_any_permitted_agent_accepts_params():
    strict = agent("a", schema={**SCHEMA, "additionalProperties": False})
    lax = agent("b", schema={"type": "object"})
    Router().admit(CAP, {"sku": "x", "extra": 1}, "alice", by_id(strict, lax), [CAP])


def test_admit_ignores_health():
    # Offline, disconnected and full agents still pass admission: health is pick's business.
    down = agent("a", state=Liveness.OFFLINE, connected=False, inflight=4, max_concurrency=4)
    Router().admit(CAP, GOOD, "alice", by_id(down), [CAP])


def test_admit_unauthorized_when_no_agent_is_permitted():
    router = Router(permissions=Permissions({"alice": ("sales.*",)}))
    with pytest.raises(Unauthorized) as info:
        router.admit(CAP, GOOD, "alice", by_id(agent("a")), [CAP])
    assert info.value.details == {"capability": CAP, "caller": "alice"}
    assert "'alice' may not use 'inventory.query'" in info.value.message


def test_admit_unauthorized_takes_precedence_over_invalid_params():
    router = Router(permissions=Permissions({"alice": ()}))
    with pytest.raises(Unauthorized):
        router.admit(CAP, {"bad": 1}, "alice", by_id(agent("a")), [CAP])


def test_admit_params_checked_only_against_permitted_agents():
    # Only the write-scoped agent would accept the params, and alice may only read.
    reader = agent("r", scope="read")
    writer = agent("w", scope="write", schema={"type": "object"})
    router = Router(permissions=Permissions({"alice": ("scope:read",)}))
    with pytest.raises(InvalidParams):
        router.admit(CAP, {"no_sku": True}, "alice", by_id(reader, writer), [CAP])


# ------------------------------------------------------------------ permissions

def test_permissions_none_allows_everything():
    assert Permissions().allows("anyone", "x.y", "write")


@pytest.mark.parametrize(("caller", "capability", "scope", "expected"), [
    ("alice", "sales.query", "write", True),      # glob
    ("alice", "sales.report.send", "write", True),  # fnmatch '*' spans dots
    ("alice", "hr.query", "write", False),
    ("alice", "hr.query", "read", True),          # scope:read
    ("alice", "Sales.query", "write", False),     # case-sensitive
    ("bob", "hr.hire", "write", True),            # scope:* allows every scope
    ("carol", "hr.hire", "read", True),           # exact name
    ("carol", "hr.fire", "read", False),
    ("mallory", "public.get", "read", True),      # falls back to "*"
    ("mallory", "public.get", "write", True),     # a name glob ignores the scope
    ("mallory", "sales.query", "read", False),
    ("dave", "public.get", "read", False),        # own empty rule beats "*"
])
def test_permission_rules(caller, capability, scope, expected):
    perms = Permissions({
        "alice": ("sales.*", "scope:read"),
        "bob": ("scope:*",),
        "carol": ("hr.hire",),
        "dave": (),
        "*": ("public.*",),
    })
    assert perms.allows(caller, capability, scope) is expected


def test_permissions_without_star_deny_unknown_callers():
    assert not Permissions({"alice": ("*",)}).allows("eve", "a.b", "read")
    assert Permissions({"alice": ("*",)}).allows("alice", "a.b", "write")


# ------------------------------------------------------------------ pick: filters

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pick_skips_every_kind_of_unfit_agent(strategy):
    fit = agent("z-fit")
    unfit = [
        agent("a-suspected", state=Liveness.SUSPECTED),
        agent("b-offline", state=Liveness.OFFLINE),
        agent("c-disconnected", connected=False),
        agent("d-full", inflight=4, max_concurrency=4),
        agent("e-breaker", breaker=open_breaker()),
        agent("f-probing", breaker=probing_breaker()),
        agent("g-schema", schema={"type": "object", "required": ["other"]}),
        agent("h-write", scope="write"),
        agent("i-excluded"),
    ]
    router = Router(strategy=strategy, permissions=Permissions({"alice": ("scope:read",)}),
                    rng=random.Random(1))
    declaring = by_id(*unfit, fit)
    for _ in range(20):
        assert router.pick(CAP, GOOD, "alice", declaring, NOW,
                           exclude=frozenset({"i-excluded"})) is fit


def test_open_breaker_past_its_wait_is_allowed_again():
    record = agent("a", breaker=open_breaker(at=NOW - 5.0))
    assert Router().pick(CAP, GOOD, "alice", by_id(record), NOW) is record


def test_saturated_when_every_healthy_agent_is_full():
    declaring = by_id(agent("a", inflight=2, max_concurrency=2),
                      agent("b", inflight=5, max_concurrency=3),
                      agent("c", state=Liveness.OFFLINE))
    with pytest.raises(Saturated) as info:
        Router().pick(CAP, GOOD, "alice", declaring, NOW)
    assert info.value.level == 1.0


def test_every_breaker_open_sends_an_early_probe_to_the_longest_open():
    declaring = by_id(agent("a", breaker=open_breaker(at=NOW - 1.0)),
                      agent("b", breaker=open_breaker(at=NOW - 3.0)),
                      agent("c", breaker=open_breaker(at=NOW - 4.0), inflight=4,
                            max_concurrency=4),
                      agent("d", breaker=probing_breaker()))
    assert Router().pick(CAP, GOOD, "alice", declaring, NOW) is declaring["b"]
    # one closed agent with room: no early probe
    declaring["e"] = agent("e")
    assert Router().pick(CAP, GOOD, "alice", declaring, NOW) is declaring["e"]


def test_unavailable_when_no_agent_is_healthy():
    declaring = by_id(agent("a", state=Liveness.SUSPECTED), agent("b", connected=False),
                      agent("c", breaker=probing_breaker()))
    with pytest.raises(Unavailable) as info:
        Router().pick(CAP, GOOD, "alice", declaring, NOW)
    assert info.value.details == {"capability": CAP}
    assert info.value.message == (
        "3 agent(s) declare 'inventory.query' but none can take it now: a suspected (no "
        "heartbeat for 100.0 s); b disconnected; c breaker half-open (its probe call is out); "
        "retry shortly")


def test_unavailable_when_everyone_is_excluded():
    declaring = by_id(agent("a"), agent("b"))
    with pytest.raises(Unavailable):
        Router().pick(CAP, GOOD, "alice", declaring, NOW, exclude=frozenset({"a", "b"}))


# ------------------------------------------------------------------ strategies

def test_round_robin_cycles_in_agent_id_order():
    declaring = by_id(agent("c"), agent("a"), agent("b"))
    router = Router(strategy="round_robin")
    picks = [router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(7)]
    assert picks == ["a", "b", "c", "a", "b", "c", "a"]


def test_round_robin_turns_are_per_capability():
    router = Router(strategy="round_robin")
    inv = by_id(agent("a"), agent("b"))
    sales = by_id(agent("s1", cap="sales.query"), agent("s2", cap="sales.query"))
    assert router.pick(CAP, GOOD, "x", inv, NOW).agent_id == "a"
    assert router.pick("sales.query", GOOD, "x", sales, NOW).agent_id == "s1"
    assert router.pick(CAP, GOOD, "x", inv, NOW).agent_id == "b"
    assert router.pick("sales.query", GOOD, "x", sales, NOW).agent_id == "s2"


def test_least_load_picks_min_inflight_over_capacity_times_weight():
    # Chosen so that ignoring the weight would pick differently every time.
    a = agent("a", inflight=2, max_concurrency=4, weight=100)   # 2/400 = 0.005 (unweighted 0.5)
    b = agent("b", inflight=1, max_concurrency=4, weight=10)    # 1/40  = 0.025 (unweighted 0.25)
    c = agent("c", inflight=1, max_concurrency=10, weight=1)    # 1/10  = 0.1   (unweighted 0.1)
    d = agent("d", inflight=0, max_concurrency=1, weight=1)     # 0
    router = Router(strategy="least_load")
    assert router.pick(CAP, GOOD, "x", by_id(a, b, c, d), NOW) is d
    assert router.pick(CAP, GOOD, "x", by_id(a, b, c), NOW) is a
    assert router.pick(CAP, GOOD, "x", by_id(b, c), NOW) is b
    assert router.pick(CAP, GOOD, "x", by_id(c, b), NOW) is b  # not insertion order


def test_lowest_latency_prefers_measured_then_declared():
    a = agent("a", latency_ms=50)
    b = agent("b", latency_ms=500)
    router = Router(strategy="lowest_latency")
    assert router.pick(CAP, GOOD, "x", by_id(a, b), NOW) is a
    # Measured latency (seconds) overrides the declared one.
    assert router.pick(CAP, GOOD, "x", by_id(a, b), NOW, latency={"a": 2.0}) is b
    assert router.pick(CAP, GOOD, "x", by_id(a, b), NOW, latency={"a": 0.01, "b": 0.4}) is a


def test_weighted_prefers_weight_times_free_capacity():
    heavy_busy = agent("a", weight=100, inflight=9, max_concurrency=10)  # 100 * 0.1 = 10
    light_free = agent("b", weight=20, inflight=0, max_concurrency=10)   # 20 * 1.0 = 20
    router = Router(strategy="weighted", rng=random.Random(0))
    for _ in range(10):
        assert router.pick(CAP, GOOD, "x", by_id(heavy_busy, light_free), NOW) is light_free


def test_weighted_shares_work_between_equal_agents():
    declaring = by_id(agent("a"), agent("b"), agent("c"))
    router = Router(strategy="weighted", rng=random.Random(7))
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(300))
    assert set(counts) == {"a", "b", "c"}
    assert min(counts.values()) > 50


def test_random_uses_the_given_rng_and_reaches_everyone():
    declaring = by_id(agent("a"), agent("b"), agent("c"))
    first = [Router(strategy="random", rng=random.Random(3)).pick(CAP, GOOD, "x", declaring,
                                                                  NOW).agent_id
             for _ in range(5)]
    assert len(set(first)) == 1  # same seed, same first choice
    router = Router(strategy="random", rng=random.Random(3))
    seen = {router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(100)}
    assert seen == {"a", "b", "c"}


# ------------------------------------------------------------------ the routing property

PERMISSIONS = Permissions({"alice": ("scope:read",), "bob": ("inventory.*",), "eve": ()})


@st.composite
def breakers(draw):
    # Mostly closed, so that fit agents are common and the interesting cases (which one,
    # saturated or not) come up often; every other state still shows up.
    kind = draw(st.sampled_from(["closed"] * 4 + ["open", "open_expired", "half_open_idle",
                                                  "half_open_probing"]))
    b = Breaker(open_for=5.0)
    if kind == "closed":
        return b
    opened = NOW - 1.0 if kind == "open" else NOW - 10.0
    for _ in range(5):
        b.record(False, opened)
    if kind.startswith("half_open"):
        b.on_dispatch(NOW - 0.5)
        if kind == "half_open_idle":
            b.probing = False
    return b


@st.composite
def agent_sets(draw):
    n = draw(st.integers(min_value=0, max_value=12))
    records = []
    for i in range(n):
        max_c = draw(st.integers(min_value=1, max_value=5))
        records.append(agent(
            f"agent-{i}",
            state=draw(st.sampled_from([Liveness.ONLINE] * 3 + list(Liveness))),
            connected=draw(st.sampled_from([True, True, True, False])),
            inflight=draw(st.integers(min_value=0, max_value=max_c + 1)),
            max_concurrency=max_c,
            weight=draw(st.floats(min_value=0.5, max_value=1000)),
            latency_ms=draw(st.floats(min_value=1, max_value=5000)),
            scope=draw(st.sampled_from(("read", "read", "write"))),
            schema=draw(st.sampled_from([SCHEMA, SCHEMA, {"type": "object"},
                                         {"type": "object", "required": ["qty"]}])),
            breaker=draw(breakers()),
        ))
    return by_id(*records)


def eligible(record: AgentRecord, caller: str, params: dict, exclude: frozenset[str]) -> bool:
    cap = record.capabilities[CAP]
    return (record.agent_id not in exclude
            and record.state is Liveness.ONLINE
            and record.connected
            and record.breaker.allows(NOW)
            and PERMISSIONS.allows(caller, CAP, cap.spec.scope)
            and record.inflight < record.max_concurrency
            and _valid(cap.validator, params))


def _valid(validator, params) -> bool:
    try:
        validator(params)
    except Exception:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    declaring=agent_sets(),
    strategy=st.sampled_from(STRATEGIES),
    caller=st.sampled_from(["alice", "alice", "bob", "eve", "zed"]),
    params=st.sampled_from([GOOD, GOOD, {"sku": "x", "qty": 2}, {"qty": 1}, {}]),
    excluded=st.sets(st.integers(min_value=0, max_value=12), max_size=3),
    seed=st.integers(min_value=0, max_value=2**32),
    latency=st.dictionaries(st.sampled_from([f"agent-{i}" for i in range(12)]),
                            st.floats(min_value=0.001, max_value=10), max_size=4),
    exact=st.sampled_from([0, 1, 3, 32]),
    sample=st.integers(min_value=1, max_value=3),
)
def test_every_strategy_only_picks_an_eligible_agent(declaring, strategy, caller, params,
                                                     excluded, seed, latency, exact, sample):
    """Whether every ready agent is scored (``exact`` or fewer of them) or a few are drawn
    (more than ``exact``): the choice is always eligible, and "saturated", "unavailable" and
    the early probe are decided over all agents, never over a sample."""
    exclude = frozenset(f"agent-{i}" for i in excluded)
    router = Router(strategy=strategy, permissions=PERMISSIONS, rng=random.Random(seed),
                    exact=exact, sample=sample)
    ok = [r for r in declaring.values() if eligible(r, caller, params, exclude)]
    full = [r for r in declaring.values()
            if r.inflight >= r.max_concurrency
            and eligible(_with_room(r), caller, params, exclude)]
    last_resort = [r for r in declaring.values()
                   if r.breaker.early_probe(NOW) and not r.breaker.allows(NOW)
                   and eligible(_closed(r), caller, params, exclude)]
    breaker_states = {aid: (r.breaker.state, r.breaker.probing) for aid, r in declaring.items()}
    for _ in range(3):
        try:
            chosen = router.pick(CAP, params, caller, declaring, NOW, exclude=exclude,
                                 latency=latency)
        except Saturated:
            assert not ok and full
        except Unavailable:
            assert not ok and not full and not last_resort
        else:
            if ok:
                assert chosen in ok
                assert eligible(chosen, caller, params, exclude)
            else:  # every fit agent is held back by an open breaker: an early probe to the
                # longest-open one (ties: the lowest agent id)
                assert chosen is min(last_resort,
                                     key=lambda r: (r.breaker.opened_at, r.agent_id))
    # Picking decides; it does not change the agents (no probe reserved, no counters moved).
    assert {aid: (r.breaker.state, r.breaker.probing)
            for aid, r in declaring.items()} == breaker_states


def _closed(record: AgentRecord) -> AgentRecord:
    clone = agent(record.agent_id, state=record.state, connected=record.connected,
                  inflight=record.inflight, max_concurrency=record.max_concurrency,
                  scope=record.capabilities[CAP].spec.scope,
                  schema=record.capabilities[CAP].spec.params)
    return clone


def _with_room(record: AgentRecord) -> AgentRecord:
    clone = agent(record.agent_id, state=record.state, connected=record.connected,
                  inflight=0, max_concurrency=record.max_concurrency,
                  scope=record.capabilities[CAP].spec.scope,
                  schema=record.capabilities[CAP].spec.params, breaker=record.breaker)
    return clone


def test_router_refuses_a_bad_sample_size():
    with pytest.raises(ValueError):
        Router(sample=0)
    with pytest.raises(ValueError):
        Router(exact=-1)


def test_early_probe_ties_go_to_the_lowest_agent_id():
    declaring = by_id(agent("b", breaker=open_breaker(at=NOW - 2.0)),
                      agent("a", breaker=open_breaker(at=NOW - 2.0), scope="write"),
                      agent("c", breaker=open_breaker(at=NOW - 2.0)))
    assert Router().pick(CAP, GOOD, "alice", declaring, NOW) is declaring["a"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_past_exact_a_drawn_few_still_spread_the_work(strategy):
    # 40 equal agents, exact=8: every pick draws; over many picks everyone gets work.
    declaring = by_id(*(agent(f"a{i:02}") for i in range(40)))
    router = Router(strategy=strategy, rng=random.Random(5), exact=8)
    counts = Counter(router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(800))
    assert set(counts) == set(declaring)


def test_sampled_least_load_prefers_the_less_loaded_of_its_draw():
    # Half the agents are nearly full: two choices avoid them far more often than chance.
    busy = [agent(f"busy{i:02}", inflight=3, max_concurrency=4) for i in range(20)]
    idle = [agent(f"idle{i:02}", inflight=0, max_concurrency=4) for i in range(20)]
    router = Router(strategy="least_load", rng=random.Random(3), exact=0, sample=2)
    declaring = by_id(*busy, *idle)
    picks = [router.pick(CAP, GOOD, "x", declaring, NOW).agent_id for _ in range(400)]
    # By chance 50 % would be idle; with two choices ~75 % (both busy only 1 in 4).
    assert sum(p.startswith("idle") for p in picks) > 0.65 * len(picks)
