"""Liveness judgement (reach/liveness.py) and the registry that applies it (reach/registry.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.liveness import Liveness, LivenessPolicy, judge
from reach.protocol import CapabilitySpec
from reach.registry import Registry
from reach.resilience import BreakerState
from reach.schemas import SchemaError

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
             now: float = 0.0, max_concurrency: int = 4, session: object = "s"):
    return reg.register(agent_id=agent_id, name=name, version="1", max_concurrency=max_concurrency,
                        specs=[spec(c) for c in caps], session=session, now=now)


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
    assert record.session is None and not record.connected
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
    again = register(reg, now=3.0, max_concurrency=9, session="s2").record
    assert again is first
    assert (again.calls, again.faults, again.inflight) == (12, 3, 2)
    assert again.breaker is breaker and again.breaker.state is BreakerState.OPEN
    assert again.max_concurrency == 9
    assert again.connected and again.session == "s2" and again.state is L.ONLINE
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
                     specs=[spec("x.get", params={"type": "nonsense"})], session=None, now=0.0)
    assert reg.by_id == {} and reg.index == {} and reg.by_name == {}


def test_intents_collects_phrases_without_duplicates():
    reg = registry()
    reg.register(agent_id="a", name="a", version="1", max_concurrency=1, session=None, now=0,
                  specs=[spec("inventory.query", intents=["how many", "stock level"],
                              description="Query stock")])
    reg.register(agent_id="b", name="b", version="1", max_concurrency=1, session=None, now=0,
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
