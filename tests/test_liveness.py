"""Liveness judgement (reach/liveness.py) and the registry that applies it (reach/registry.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from reach.core.liveness import Liveness, LivenessPolicy, deadline, judge
from reach.core.registry import Registry
from reach.core.resilience import BreakerState
from reach.core.schemas import SchemaError
from reach.testing import FakeAgentLink
from reach.wire.protocol import CapabilitySpec

L = Liveness
POLICY = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)
RANK = {L.ONLINE: 0, L.SUSPECTED: 1, L.OFFLINE: 2}


def at(elapsed: float, *, connected: bool = True, draining: bool = False,
       policy: LivenessPolicy = POLICY) -> Liveness:
    return judge(policy, last_beat=1000.0, now=1000.0 + elapsed, connected=connected,
                 draining=draining)


# ------------------------------------------------------------------ policy

def test_policy_defaults():
    policy = LivenessPolicy()
    assert (policy.interval, policy.suspect_after, policy.offline_after) == (10.0, 2.0, 3.0)


@pytest.mark.parametrize("kwargs", [
    {"interval": 0}, {"interval": -1.0},
    {"suspect_after": 0}, {"suspect_after": -1},
    {"suspect_after": 4.0, "offline_after": 3.0},
])
def test_policy_rejects_bad_thresholds(kwargs):
    with pytest.raises(ValueError):
        LivenessPolicy(**kwargs)


def test_policy_allows_equal_thresholds():
    policy = LivenessPolicy(suspect_after=3.0, offline_after=3.0)
    assert at(30.0, policy=policy) is L.ONLINE
    assert at(30.1, policy=policy) is L.OFFLINE


# ------------------------------------------------------------------ thresholds

@pytest.mark.parametrize(("elapsed", "expected"), [
    (0.0, L.ONLINE),
    (10.0, L.ONLINE),
    (19.99, L.ONLINE),
    (20.0, L.ONLINE),         # exactly suspect_after intervals missed: still online
    (20.001, L.SUSPECTED),    # more than suspect_after: suspected
    (29.0, L.SUSPECTED),
    (30.0, L.SUSPECTED),      # exactly offline_after: still suspected
    (30.001, L.OFFLINE),      # more than offline_after: offline
    (3600.0, L.OFFLINE),
])
def test_thresholds_in_missed_intervals(elapsed, expected):
    assert at(elapsed) is expected


def test_thresholds_scale_with_interval():
    policy = LivenessPolicy(interval=2.0, suspect_after=2.0, offline_after=3.0)
    assert at(4.0, policy=policy) is L.ONLINE
    assert at(4.5, policy=policy) is L.SUSPECTED
    assert at(6.5, policy=policy) is L.OFFLINE


def test_closed_socket_is_suspected_at_once_not_offline():
    assert at(0.0, connected=False) is L.SUSPECTED
    assert at(29.9, connected=False) is L.SUSPECTED
    # Only silence longer than offline_after makes it offline.
    assert at(30.1, connected=False) is L.OFFLINE


def test_draining_alone_is_suspected():
    assert at(0.0, draining=True) is L.SUSPECTED


def test_draining_and_disconnected_is_offline_at_once():
    assert at(0.0, connected=False, draining=True) is L.OFFLINE


def test_a_beat_in_the_future_is_online():
    # Clock skew between a beat's stamp and ``now``: negative elapsed must not break anything.
    assert at(-5.0) is L.ONLINE


@settings(max_examples=200, deadline=None)
@given(
    interval=st.floats(min_value=0.01, max_value=100),
    suspect=st.floats(min_value=0.1, max_value=10),
    extra=st.floats(min_value=0, max_value=10),
    connected=st.booleans(),
    draining=st.booleans(),
    times=st.lists(st.floats(min_value=0, max_value=5000), min_size=2, max_size=12),
)
def test_state_is_monotone_in_elapsed_time(interval, suspect, extra, connected, draining,
                                           times):
    policy = LivenessPolicy(interval=interval, suspect_after=suspect,
                            offline_after=suspect + extra)
    states = [judge(policy, last_beat=0.0, now=t, connected=connected, draining=draining)
              for t in sorted(times)]
    ranks = [RANK[s] for s in states]
    assert ranks == sorted(ranks), list(zip(sorted(times), states, strict=True))
    # And the judgement agrees with the thresholds.
    for t, state in zip(sorted(times), states, strict=True):
        missed = t / interval
        if missed > policy.offline_after:
            assert state is L.OFFLINE
        elif connected and not draining:
            assert state is (L.SUSPECTED if missed > suspect else L.ONLINE)
        elif not connected and draining:
            assert state is L.OFFLINE
        else:
            assert state is L.SUSPECTED


# ------------------------------------------------------------------ registry

def spec(name: str, **kw) -> CapabilitySpec:
    return CapabilitySpec(name=name, **kw)


def registry() -> Registry:
    return Registry(POLICY, breaker_open_for=7.0)


def register(reg: Registry, agent_id: str = "a1", name: str = "inv", caps=("inventory.query",),
             now: float = 0.0, max_concurrency: int = 4, link: Any = None):
    return reg.register(agent_id=agent_id, name=name, version="1", max_concurrency=max_concurrency,
                        specs=[spec(c) for c in caps], link=link, now=now)


def test_register_adds_online_record_indexed_by_capability():
    reg = registry()
    out = register(reg, caps=("inventory.query", "inventory.update"), now=5.0)
    record = out.record
    assert record.state is L.ONLINE and record.connected and not record.draining
    assert record.last_beat == record.registered_at == 5.0
    assert record.breaker.open_for == 7.0
    assert reg.by_id == {"a1": record}
    assert reg.by_name == {"inv": record}
    assert reg.declaring("inventory.query") == {"a1": record}
    assert reg.declaring("inventory.update") == {"a1": record}
    assert reg.declaring("nobody.declares") == {}
    assert reg.capability_names() == ["inventory.query", "inventory.update"]
    assert out.normalized == ["inventory.query", "inventory.update"]
    assert out.warnings == []


def test_heartbeat_restores_online_from_suspected():
    reg = registry()
    record = register(reg, now=0.0).record
    assert reg.sweep(25.0) == [(record, L.SUSPECTED)]
    assert record.state is L.SUSPECTED
    assert reg.heartbeat(record, 26.0, inflight=2, queue_depth=1, load=0.5) is L.ONLINE
    assert record.state is L.ONLINE
    assert record.last_beat == 26.0
    assert (record.reported_inflight, record.queue_depth, record.load) == (2, 1, 0.5)


def test_heartbeat_without_change_returns_none():
    reg = registry()
    record = register(reg, now=0.0).record
    assert reg.heartbeat(record, 5.0, inflight=0, queue_depth=0, load=0.0) is None
    assert record.state is L.ONLINE


def test_heartbeat_does_not_make_a_closed_socket_online():
    reg = registry()
    record = register(reg, now=0.0).record
    assert reg.disconnected(record, 1.0) is L.SUSPECTED
    assert record.link is None and not record.connected
    assert reg.heartbeat(record, 2.0, inflight=0, queue_depth=0, load=0.0) is None
    assert record.state is L.SUSPECTED


def test_disconnected_then_silence_goes_offline_on_sweep():
    reg = registry()
    record = register(reg, now=0.0).record
    reg.disconnected(record, 0.5)
    assert reg.sweep(29.0) == []
    assert reg.sweep(31.0) == [(record, L.OFFLINE)]
    assert reg.sweep(40.0) == []  # no change, nothing reported


def test_deregister_drains_and_disconnect_then_makes_offline():
    reg = registry()
    record = register(reg, now=0.0).record
    assert reg.deregister(record, 1.0) is L.SUSPECTED
    assert record.draining
    assert reg.disconnected(record, 2.0) is L.OFFLINE


def test_sweep_reports_only_changed_agents():
    reg = registry()
    a = register(reg, agent_id="a", name="a", now=0.0).record
    b = register(reg, agent_id="b", name="b", now=15.0).record
    assert reg.sweep(10.0) == []
    changed = reg.sweep(25.0)
    assert changed == [(a, L.SUSPECTED)]
    assert b.state is L.ONLINE
    changed = reg.sweep(36.0)
    assert set((r.agent_id, s) for r, s in changed) == {("a", L.OFFLINE), ("b", L.SUSPECTED)}


def test_reregister_same_id_keeps_counters_and_breaker():
    reg = registry()
    first = register(reg, now=0.0).record
    first.calls, first.faults, first.inflight = 12, 3, 2
    breaker = first.breaker
    for _ in range(5):
        breaker.record(False, 1.0)
    assert breaker.state is BreakerState.OPEN
    reg.disconnected(first, 2.0)
    again = register(reg, now=3.0, max_concurrency=9, link=FakeAgentLink()).record
    assert again is first
    assert (again.calls, again.faults, again.inflight) == (12, 3, 2)
    assert again.breaker is breaker and again.breaker.state is BreakerState.OPEN
    assert again.max_concurrency == 9
    assert again.connected and isinstance(again.link, FakeAgentLink) and again.state is L.ONLINE
    assert again.last_beat == again.registered_at == 3.0


def test_reregister_with_fewer_capabilities_updates_the_index():
    reg = registry()
    register(reg, caps=("inventory.query", "inventory.update"))
    other = register(reg, agent_id="b", name="b", caps=("inventory.update",)).record
    record = register(reg, caps=("inventory.query",), now=1.0).record
    assert reg.declaring("inventory.query") == {"a1": record}
    assert reg.declaring("inventory.update") == {"b": other}
    assert set(record.capabilities) == {"inventory.query"}
    # When the last declarer drops a capability it leaves the index entirely.
    register(reg, caps=("sales.query",), now=2.0)
    assert "inventory.query" not in reg.index
    assert reg.capability_names() == ["inventory.update", "sales.query"]


def test_reregister_after_draining_clears_draining():
    reg = registry()
    record = register(reg).record
    reg.deregister(record, 1.0)
    register(reg, now=2.0)
    assert not record.draining and record.state is L.ONLINE


def test_register_normalizes_names_and_warns():
    reg = registry()
    out = register(reg, caps=("QueryInventory",))
    assert out.normalized == ["inventory.query"]
    assert out.warnings == ["capability 'QueryInventory' registered as 'inventory.query'"]
    assert set(reg.index) == {"inventory.query"}
    assert set(out.record.capabilities) == {"inventory.query"}


def test_register_warns_about_look_alikes_of_other_agents():
    reg = registry()
    register(reg, agent_id="a", name="a", caps=("inventory.query",))
    out = register(reg, agent_id="b", name="b", caps=("query.inventory",))
    assert out.normalized == ["query.inventory"]
    assert len(out.warnings) == 1
    warning = out.warnings[0]
    assert "'query.inventory'" in warning and "'inventory.query'" in warning
    assert "looks like" in warning
    # Both stay distinct entries: the warning is advice, not a merge.
    assert reg.capability_names() == ["inventory.query", "query.inventory"]


def test_same_name_from_another_agent_is_not_a_look_alike():
    reg = registry()
    register(reg, agent_id="a", name="a", caps=("inventory.query",))
    out = register(reg, agent_id="b", name="b", caps=("inventory.query",))
    assert out.warnings == []
    assert set(reg.declaring("inventory.query")) == {"a", "b"}


def test_register_rejects_broken_schema_and_leaves_registry_untouched():
    reg = registry()
    with pytest.raises(SchemaError):
        reg.register(agent_id="a", name="a", version="1", max_concurrency=1,
                     specs=[spec("x.get", params={"type": "nonsense"})], link=None, now=0.0)
    assert reg.by_id == {} and reg.index == {} and reg.by_name == {}


def test_intents_collects_phrases_without_duplicates():
    reg = registry()
    reg.register(agent_id="a", name="a", version="1", max_concurrency=1, link=None, now=0,
                  specs=[spec("inventory.query", intents=["how many", "stock level"],
                              description="Query stock")])
    reg.register(agent_id="b", name="b", version="1", max_concurrency=1, link=None, now=0,
                 specs=[spec("inventory.query", intents=["stock level", "on hand"],
                             description="Query stock")])
    assert reg.intents() == {"inventory.query": ["how many", "stock level", "Query stock",
                                                 "on hand"]}


def test_agent_view():
    reg = registry()
    record = register(reg, caps=("b.get", "a.get"), now=10.0).record
    view = record.view(now=12.5)
    assert view["capabilities"] == ["a.get", "b.get"]
    assert view["since_heartbeat_s"] == 2.5
    assert view["state"] == "online" and view["breaker"] == "closed"
    assert view["agent_id"] == "a1" and view["name"] == "inv"
    assert record.view(now=5.0)["since_heartbeat_s"] == 0.0  # never negative


def test_a_capability_declared_twice_in_one_registration_is_refused():
    reg = registry()
    with pytest.raises(ValueError, match="declared twice"):
        register(reg, caps=("inventory.query", "QueryInventory"))
    assert reg.by_id == {} and reg.index == {}


def test_renaming_its_own_capability_does_not_warn_against_itself():
    reg = registry()
    register(reg, caps=("inventory.query",))
    again = register(reg, caps=("query.inventory",))
    assert again.warnings == []
    other = register(reg, agent_id="a2", name="other", caps=("inventory.query",))
    assert any("looks like existing 'query.inventory'" in w for w in other.warnings)


# ------------------------------------------------------------------ the sweep's deadlines

def test_deadline_is_when_judge_would_next_get_worse():
    assert deadline(POLICY, L.ONLINE, 100.0) == 120.0
    assert deadline(POLICY, L.SUSPECTED, 100.0) == 130.0
    assert deadline(POLICY, L.OFFLINE, 100.0) is None
    assert at(20.0) is L.ONLINE and at(20.001) is L.SUSPECTED
    assert at(30.0, connected=False) is L.SUSPECTED and at(30.001, connected=False) is L.OFFLINE


def test_a_sweep_looks_only_at_agents_whose_deadline_passed():
    reg = registry()
    records = [register(reg, agent_id=f"a{i}", name=f"a{i}", now=float(i)).record
               for i in range(100)]
    looked = []
    real_set = reg._set

    def counting_set(record, now):
        looked.append(record.agent_id)
        return real_set(record, now)
    reg._set = counting_set
    # Agents registered at 0..99 s, suspected 20 s after their last beat: at 30.5 s, those
    # registered at 0..10 are due (and become suspected); nobody else is looked at.
    changed = reg.sweep(30.5)
    assert sorted(r.agent_id for r, _ in changed) == sorted(f"a{i}" for i in range(11))
    assert sorted(looked) == sorted(f"a{i}" for i in range(11))
    looked.clear()
    # A beat does not touch the wheel: a1's entry (due at 31 s, to go offline) comes up,
    # finds the beat and moves to the new deadline (51 s) without judging it again.
    reg.heartbeat(records[1], 31.0, inflight=0, queue_depth=0, load=0.0)
    looked.clear()
    assert reg.sweep(31.5) == [(records[11], L.SUSPECTED)]
    assert looked == ["a11"]
    assert records[1].due == 51.0
    looked.clear()
    # Due by 40.5 s: a2..a10 (offline 30 s after their beat; a0 went straight there at
    # 30.5 s) and a12..a20 (suspected).
    changed = reg.sweep(40.5)
    assert set(changed) == {(r, L.OFFLINE) for r in records[2:11]} | {
        (r, L.SUSPECTED) for r in records[12:21]}
    assert sorted(looked) == sorted(r.agent_id for r, _ in changed)
    assert records[1].state is L.ONLINE


def test_a_clock_that_went_back_does_not_lose_an_agent():
    reg = registry()
    register(reg, agent_id="a", name="a", now=100.0)
    reg.sweep(110.0)
    # The wall clock steps back 100 s: an agent registered "then" is still watched.
    b = register(reg, agent_id="b", name="b", now=10.0).record
    assert reg.sweep(35.0) == [(b, L.SUSPECTED)]


def test_a_sweep_after_a_long_silence_looks_only_at_slots_in_use():
    # (Walking every slot between 0 and 1e12 s would not finish.)
    reg = registry()
    a = register(reg, agent_id="a", name="a", now=0.0).record
    reg.sweep(1.0)
    assert reg.sweep(1e12) == [(a, L.OFFLINE)]
    b = register(reg, agent_id="b", name="b", now=1e12).record
    assert reg.sweep(1e12 + 25.0) == [(b, L.SUSPECTED)]


class SweepMatchesJudgingEveryone(RuleBasedStateMachine):
    """The heap of deadlines is an optimisation only: after any sweep, every agent is in the
    state ``judge`` gives it (what re-judging every agent gave), and a sweep reports exactly
    the agents whose state it changed. Times sit near a wall-clock epoch so thresholds are
    met with real rounding."""

    @initialize(interval=st.sampled_from([0.1, 1.0, 3.0, 10.0]),
                suspect=st.sampled_from([1.0, 2.0, 2.5]), extra=st.sampled_from([0.0, 1.0]),
                base=st.sampled_from([0.0, 1.7e9]))
    def start(self, interval: float, suspect: float, extra: float, base: float) -> None:
        self.policy = LivenessPolicy(interval, suspect, suspect + extra)
        self.reg = Registry(self.policy)
        self.now = base
        self.records = [register(self.reg, agent_id=f"a{i}", name=f"a{i}", now=base).record
                        for i in range(4)]

    @rule(steps=st.integers(1, 40))
    def time_passes(self, steps: int) -> None:
        # In tenths of an interval, so that thresholds are hit exactly as often as not.
        self.now += steps * self.policy.interval / 10

    @rule(steps=st.integers(1, 3))
    def a_moment_passes(self, steps: int) -> None:
        self.now += steps * self.policy.interval / 1000

    @rule(i=st.integers(0, 3))
    def beat(self, i: int) -> None:
        if self.records[i].connected:
            self.reg.heartbeat(self.records[i], self.now, inflight=0, queue_depth=0, load=0.0)

    @rule(i=st.integers(0, 3), what=st.sampled_from(["disconnect", "drain", "undrain",
                                                    "register"]))
    def change(self, i: int, what: str) -> None:
        record = self.records[i]
        if what == "disconnect":
            self.reg.disconnected(record, self.now)
        elif what == "drain":
            self.reg.deregister(record, self.now)
        elif what == "undrain":
            self.reg.undrain(record, self.now)
        else:
            register(self.reg, agent_id=record.agent_id, name=record.name, now=self.now)

    @rule()
    def sweep(self) -> None:
        before = {r.agent_id: r.state for r in self.records}
        changed = self.reg.sweep(self.now)
        for record in self.records:
            assert record.state is judge(self.policy, last_beat=record.last_beat, now=self.now,
                                         connected=record.connected, draining=record.draining)
        assert sorted(r.agent_id for r, _ in changed) == sorted(
            r.agent_id for r in self.records if r.state is not before[r.agent_id])
        assert all(state is r.state for r, state in changed)

    @invariant()
    def every_live_agent_is_scheduled(self) -> None:
        for record in getattr(self, "records", ()):
            if record.state is not L.OFFLINE:
                assert record.due is not None


SweepMatchesJudgingEveryone.TestCase.settings = settings(max_examples=100,
                                                         stateful_step_count=30, deadline=None)
test_sweep_matches_judging_everyone = SweepMatchesJudgingEveryone.TestCase


@st.composite
def near_thresholds(draw, policy: LivenessPolicy, base: float) -> list[float]:
    """Sweep times at, just before and just after the thresholds (down to one ulp)."""
    times = []
    for _ in range(draw(st.integers(1, 8))):
        at = base + policy.interval * draw(st.sampled_from(
            [policy.suspect_after, policy.offline_after, 0.5, 1.0, 5.0]))
        nudge = draw(st.sampled_from(["ulp-", "exact", "ulp+", "milli-", "milli+"]))
        if nudge.startswith("ulp"):
            at = math.nextafter(at, math.inf if nudge == "ulp+" else -math.inf)
        elif nudge.startswith("milli"):
            at += policy.interval * (1e-3 if nudge == "milli+" else -1e-3)
        times.append(at)
    return sorted(times)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), interval=st.sampled_from([0.1, 0.3, 1.0, 7.0, 10.0]),
       suspect=st.sampled_from([1.0, 2.0, 2.5]), extra=st.sampled_from([0.0, 0.5, 1.0]),
       base=st.sampled_from([0.0, 1_700_000_000.123]),
       how=st.sampled_from(["silent", "disconnected", "draining"]))
def test_sweeps_at_threshold_times_match_judge(data, interval, suspect, extra, base, how):
    policy = LivenessPolicy(interval, suspect, suspect + extra)
    reg = Registry(policy)
    record = register(reg, now=base).record
    if how == "disconnected":
        reg.disconnected(record, base)
    elif how == "draining":
        reg.deregister(record, base)
    for now in data.draw(near_thresholds(policy, base)):
        before = record.state
        changed = reg.sweep(now)
        expected = judge(policy, last_beat=base, now=now, connected=record.connected,
                         draining=record.draining)
        assert record.state is expected, (now - base) / interval
        assert changed == ([] if expected is before else [(record, expected)])
