"""The routable index (reach/registry.py ``Declared``/``Group``) and what it buys routing: every
kind of change moves an agent on or off the ready shelf, picks stay right against a brute-force
oracle while the registry changes under them, and the work of one pick does not grow with the
number of agents (counted in agents looked at, never in time)."""

from __future__ import annotations

import random

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from reach.core.agents import FULL, HELD, OUT, READY, AgentRecord, Declared, routable
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.registry import Registry
from reach.core.resilience import BreakerState
from reach.core.routing import STRATEGIES, Permissions, Router, Saturated
from reach.core.schemas import check
from reach.errors import Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "inventory.query"
OTHER = "inventory.count"
SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
LAX = {"type": "object"}
GOOD = {"sku": "A-1"}
POLICY = LivenessPolicy(interval=1.0, suspect_after=2.0, offline_after=3.0)


def registry() -> Registry:
    return Registry(POLICY, breaker_open_for=5.0)


def join(reg: Registry, i: int, *, now: float = 0.0, max_concurrency: int = 2,
         schema: dict = SCHEMA, scope: str = "read", caps: tuple[str, ...] = (CAP,),
         weight: float = 50.0) -> AgentRecord:
    return reg.register(
        agent_id=f"a{i:05}", name=f"a{i:05}", version="1", max_concurrency=max_concurrency,
        specs=[CapabilitySpec(name=c, params=schema, scope=scope, weight=weight) for c in caps],
        link=None, now=now).record


def shelf(reg: Registry, record: AgentRecord, cap: str = CAP) -> int:
    """Where the index has ``record`` for ``cap`` (OUT when on no shelf)."""
    declared = reg.declaring(cap)
    cap_of = record.capabilities[cap]
    group = declared.groups[(cap_of.spec.scope, cap_of.validator, frozenset(cap_of.spec.tags))]
    return group.where.get(record, OUT)


def fail(record: AgentRecord, now: float, times: int = 5) -> None:
    for _ in range(times):
        record.breaker.record(False, now)


# ------------------------------------------------------------------ every kind of change

def test_registration_puts_an_agent_on_the_ready_shelf_of_its_group():
    reg = registry()
    a, b = join(reg, 1), join(reg, 2)
    c = join(reg, 3, schema=LAX)
    d = join(reg, 4, scope="write")
    declared = reg.declaring(CAP)
    assert isinstance(declared, Declared) and set(declared) == {a.agent_id, b.agent_id,
                                                                c.agent_id, d.agent_id}
    # One group per (scope, schema): a and b share one.
    assert len(declared.groups) == 3
    assert all(shelf(reg, r) == READY for r in (a, b, c, d))
    assert shelf(reg, a) == READY and a.groups[0] is b.groups[0]


def test_slots_taken_and_freed_move_between_ready_and_full_in_every_group():
    reg = registry()
    record = join(reg, 1, caps=(CAP, OTHER), max_concurrency=2)
    record.inflight += 1
    assert shelf(reg, record) == shelf(reg, record, OTHER) == READY
    record.inflight += 1
    assert shelf(reg, record) == shelf(reg, record, OTHER) == FULL
    record.inflight -= 1
    assert shelf(reg, record) == shelf(reg, record, OTHER) == READY


def test_liveness_changes_take_an_agent_off_and_back():
    reg = registry()
    record = join(reg, 1)
    assert reg.sweep(2.5) == [(record, Liveness.SUSPECTED)]
    assert shelf(reg, record) == OUT
    reg.heartbeat(record, 2.6, inflight=0, queue_depth=0, load=0.0)
    assert shelf(reg, record) == READY
    reg.disconnected(record, 3.0)
    assert shelf(reg, record) == OUT
    assert reg.sweep(10.0) == [(record, Liveness.OFFLINE)]
    assert shelf(reg, record) == OUT
    join(reg, 1, now=11.0)
    assert shelf(reg, record) == READY
    reg.deregister(record, 11.5)
    assert shelf(reg, record) == OUT
    reg.undrain(record, 11.6)
    assert shelf(reg, record) == READY


def test_a_breaker_change_is_found_by_the_next_pick_that_looks():
    reg = registry()
    record = join(reg, 1)
    fail(record, 1.0)
    # Breakers do not announce changes: the agent is still shelved as ready, but the first
    # pick that looks at it moves it (even a pick that excludes it).
    assert shelf(reg, record) == READY
    with pytest.raises(Unavailable):
        Router().pick(CAP, GOOD, "x", reg.declaring(CAP), 1.0,
                      exclude=frozenset({record.agent_id}))
    assert shelf(reg, record) == HELD
    # Early probe: every fit agent is held by an open breaker.
    assert Router().pick(CAP, GOOD, "x", reg.declaring(CAP), 1.5) is record
    record.breaker.reset()
    assert shelf(reg, record) == HELD
    assert Router().pick(CAP, GOOD, "x", reg.declaring(CAP), 2.0) is record
    assert shelf(reg, record) == READY


def test_a_slot_change_also_re_reads_the_breaker():
    reg = registry()
    record = join(reg, 1)
    fail(record, 1.0)
    record.inflight += 1
    assert shelf(reg, record) == HELD


def test_re_registration_moves_groups_and_limits():
    reg = registry()
    record = join(reg, 1, caps=(CAP, OTHER), max_concurrency=1)
    record.inflight = 1
    assert shelf(reg, record) == FULL
    join(reg, 1, now=1.0, max_concurrency=4, schema=LAX, caps=(CAP,))
    assert shelf(reg, record) == READY
    assert OTHER not in reg.index
    declared = reg.declaring(CAP)
    assert len(declared.groups) == 1
    group = next(iter(declared.groups.values()))
    assert group.validator is record.capabilities[CAP].validator
    assert group.members == 1 and record.groups == [group]


def test_last_member_leaving_removes_the_group():
    reg = registry()
    join(reg, 1)
    join(reg, 2, schema=LAX)
    join(reg, 2, now=1.0)  # a2 now shares a1's schema: its old group goes
    assert len(reg.declaring(CAP).groups) == 1
    assert reg.declaring(CAP).groups[("read", reg.by_id["a00001"].capabilities[CAP].validator,
                                      frozenset())].members == 2


# ------------------------------------------------------------------ picks under change

def _fit(record: AgentRecord, caller: str, params: dict, perms: Permissions) -> bool:
    cap = record.capabilities[CAP]
    return perms.allows(caller, CAP, cap.spec.scope) and check(cap.validator, params) is None


def _oracle(reg: Registry, caller: str, params: dict, exclude: frozenset[str], now: float,
            perms: Permissions) -> tuple[list[AgentRecord], bool, list[AgentRecord]]:
    """(eligible agents, some fit agent is healthy but full, early-probe candidates)."""
    ok, full, last = [], False, []
    for r in reg.declaring(CAP).values():
        if r.agent_id in exclude or not r.reachable or not _fit(r, caller, params, perms):
            continue
        room = r.inflight < r.max_concurrency
        if r.breaker.allows(now):
            if room:
                ok.append(r)
            else:
                full = True
        elif r.breaker.early_probe(now) and room:
            last.append(r)
    return ok, full, last


def _shelves_lag_only_on_breakers(reg: Registry) -> None:
    """Apart from breaker changes not yet seen by a pick, every agent is where its state says;
    and a group's member count is the number of its declarers."""
    for cap, declared in reg.index.items():
        counted = 0
        for group in declared.groups.values():
            counted += group.members
            for shelf_ in (group.ready, group.full, group.held):
                for record in shelf_.items:
                    assert record in shelf_
        assert counted == len(declared)
        for record in declared.values():
            c = record.capabilities[cap]
            group = declared.groups[(c.spec.scope, c.validator, frozenset(c.spec.tags))]
            where, status = group.where.get(record, OUT), routable(record)
            if where != status:
                assert HELD in (where, status) and OUT not in (where, status), (
                    record.agent_id, where, status)


N = 4  # few agents, so that the same ones are hit by several changes in one run
AGENT = st.integers(0, N - 1)
PERMS = Permissions({"alice": ("scope:read",), "bob": ("*",)})


class RegistryUnderChange(RuleBasedStateMachine):
    """Every kind of change the coordinator makes to agents, in any order, with picks in
    between checked against a brute-force oracle over all agents."""

    @initialize(strategy=st.sampled_from(STRATEGIES), exact=st.sampled_from([0, 2, 32]),
                seed=st.integers(0, 2**16))
    def start(self, strategy: str, exact: int, seed: int) -> None:
        self.router = Router(strategy=strategy, permissions=PERMS, rng=random.Random(seed),
                             exact=exact)
        # Liveness slow against the steps (beats are one rule of many), breakers not.
        self.reg = Registry(LivenessPolicy(interval=5.0), breaker_open_for=3.0)
        self.now = 0.0
        self.records = [join(self.reg, i, max_concurrency=2) for i in range(N)]

    @rule(i=AGENT)
    def beat(self, i: int) -> None:
        if self.records[i].connected:
            self.reg.heartbeat(self.records[i], self.now, inflight=0, queue_depth=0, load=0.0)

    @rule(dt=st.floats(0.05, 2.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @rule()
    def sweep(self) -> None:
        self.reg.sweep(self.now)

    @rule(i=AGENT)
    def disconnect(self, i: int) -> None:
        self.reg.disconnected(self.records[i], self.now)

    @rule(i=AGENT, max_c=st.integers(1, 3), scope=st.sampled_from(["read", "write"]),
          strict=st.booleans())
    def register(self, i: int, max_c: int, scope: str, strict: bool) -> None:
        join(self.reg, i, now=self.now, max_concurrency=max_c, scope=scope,
             schema=SCHEMA if strict else LAX)

    @rule(i=AGENT, drain=st.booleans())
    def drain(self, i: int, drain: bool) -> None:
        (self.reg.deregister if drain else self.reg.undrain)(self.records[i], self.now)

    @rule(i=AGENT, take=st.booleans())
    def slot(self, i: int, take: bool) -> None:
        if take:
            self.records[i].inflight += 1
        elif self.records[i].inflight:
            self.records[i].inflight -= 1

    @rule(i=AGENT)
    def fill(self, i: int) -> None:
        self.records[i].inflight = self.records[i].max_concurrency

    @rule(i=AGENT)
    def trip(self, i: int) -> None:
        fail(self.records[i], self.now)  # enough faults to open a closed breaker

    @rule(i=AGENT, outcome=st.sampled_from(["fault", "ok", "dispatch", "reset"]))
    def breaker(self, i: int, outcome: str) -> None:
        b = self.records[i].breaker
        if outcome == "dispatch":  # an open breaker's half-open probe goes out
            b.on_dispatch(self.now)
        elif outcome == "reset":
            b.reset()
        else:
            b.record(outcome == "ok", self.now)

    @rule(caller=st.sampled_from(["alice", "bob"]), params=st.sampled_from([GOOD, {"qty": 1}]),
          excluded=st.sets(AGENT, max_size=3))
    def pick(self, caller: str, params: dict, excluded: set[int]) -> None:
        exclude = frozenset(f"a{i:05}" for i in excluded)
        ok, full, last = _oracle(self.reg, caller, params, exclude, self.now, PERMS)
        try:
            chosen = self.router.pick(CAP, params, caller, self.reg.declaring(CAP), self.now,
                                      exclude)
        except Saturated:
            event("saturated")
            assert not ok and full
        except Unavailable:
            event("unavailable")
            assert not ok and not full and not last
        else:
            if ok:
                event("picked" + (" (a breaker not closed among the fit)" if any(
                    r.breaker.state is not BreakerState.CLOSED for r in ok) else ""))
                assert chosen in ok
            else:
                event("early probe")
                assert chosen is min(last, key=lambda r: (r.breaker.opened_at, r.agent_id))

    @rule(caller=st.sampled_from(["alice", "bob"]), excluded=st.sets(AGENT, max_size=1))
    def pick_valid(self, caller: str, excluded: set[int]) -> None:
        self.pick(caller, GOOD, excluded)

    @invariant()
    def shelves_lag_only_on_breakers(self) -> None:
        if hasattr(self, "reg"):
            _shelves_lag_only_on_breakers(self.reg)


RegistryUnderChange.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                                 deadline=None)
test_picks_stay_right_while_the_registry_changes = RegistryUnderChange.TestCase


# ------------------------------------------------------------------ work does not grow

def _cluster(n: int, open_breakers: int = 0) -> Registry:
    rng = random.Random(n)
    reg = registry()
    for i in range(n):
        record = join(reg, i, max_concurrency=8, weight=rng.choice([20.0, 50.0, 80.0]))
        record.inflight = rng.randint(0, 8)  # some full, most not
    for record in list(reg.by_id.values())[:open_breakers]:
        fail(record, 0.5)
    return reg


@pytest.fixture(scope="module")
def clusters() -> dict[int, Registry]:
    return {n: _cluster(n, open_breakers=3) for n in (100, 10_000)}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_pick_looks_at_as_many_agents_at_10000_as_at_100(clusters, strategy):
    looked = {}
    for n, reg in clusters.items():
        router = Router(strategy=strategy, rng=random.Random(1))
        declared = reg.declaring(CAP)
        router.pick(CAP, GOOD, "x", declared, 1.0)  # the first pick shelves the open breakers
        router.examined = 0
        for _ in range(200):
            router.pick(CAP, GOOD, "x", declared, 1.0)
        looked[n] = router.examined / 200
    # The three held agents (open breakers) and the drawn few, whatever the cluster size.
    assert looked[10_000] <= 3 + router.sample
    assert looked[10_000] <= looked[100] + 0.5, looked


def test_saturation_is_decided_without_scanning_every_full_agent():
    reg = _cluster(5_000)
    for record in reg.by_id.values():
        record.inflight = record.max_concurrency
    router = Router()
    with pytest.raises(Saturated):
        router.pick(CAP, GOOD, "x", reg.declaring(CAP), 1.0)
    assert router.examined <= 2


# ------------------------------------------------------------------ connecting many agents

async def test_an_agent_change_wakes_slot_waiters_without_a_pass_over_every_agent():
    """``Gateway.agents_changed`` runs on every registration: it must not cost a pass over
    all agents (connecting n agents was n²), and still wakes as many waiters of a
    capability as agents declare it."""
    import asyncio

    from reach import Reach

    reach = Reach()  # not started: no sockets, no store I/O
    for i in range(2_000):
        join(reach.registry, i)
    join(reach.registry, 9_999, caps=(OTHER,))
    woken: list[tuple[str, ...]] = []
    wake = reach.gateway.slots.wake
    reach.gateway.slots.wake = lambda caps, now, *usage: (woken.append(tuple(caps)),
                                                           wake(caps, now, *usage))
    reach.gateway.agents_changed()
    assert woken == []  # nobody waiting: nothing to do
    slots = reach.gateway.slots
    waiters = [asyncio.create_task(slots.wait(CAP, 5, 0.0, 5.0)) for _ in range(3)] + [
        asyncio.create_task(slots.wait(OTHER, 5, 0.0, 5.0)) for _ in range(2)]
    await asyncio.sleep(0)
    reach.gateway.agents_changed()
    # Three waiters for CAP (2,000 declare it), one of two for OTHER (one agent declares it).
    assert sorted(woken) == sorted([(CAP,)] * 3 + [(OTHER,)])
    await asyncio.sleep(0)
    assert [w.done() for w in waiters] == [True, True, True, True, False]
    waiters[-1].cancel()
