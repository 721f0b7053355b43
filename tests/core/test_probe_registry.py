"""The registry's side of probes and per-agent heartbeat intervals: a probe hold suspects an
agent whatever its beats say and only lifting it brings it back; each agent is judged and
swept on its own interval (bounded), agents of other intervals beside it."""

from __future__ import annotations

from typing import Any

import pytest

from reach.core.agents import AgentRecord
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.probes import ProbeState
from reach.core.registry import Registry
from reach.wire.protocol import CapabilitySpec

POLICY = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)


def register(reg: Registry, name: str, now: float, interval: float | None = None,
             heard: bool = True) -> AgentRecord:
    return reg.register(agent_id=f"id-{name}", name=name, version="1", max_concurrency=2,
                        specs=[CapabilitySpec(name="x.work")], link=None, now=now,
                        heartbeat_interval=interval, heard=heard).record


def beat(reg: Registry, record: AgentRecord, now: float) -> Liveness | None:
    return reg.heartbeat(record, now, inflight=0, queue_depth=0, load=0.0)


def test_a_hold_suspects_beats_do_not_lift_it_and_lifting_it_does() -> None:
    reg = Registry(POLICY)
    seen: list[str] = []
    reg.listen(lambda r: seen.append(r.state.value))
    record = register(reg, "z", 0.0)
    assert reg.hold(record, True, 1.0) is Liveness.SUSPECTED
    assert not record.reachable and record.suspected_by(1.0) == "probe"
    assert beat(reg, record, 2.0) is None and record.state is Liveness.SUSPECTED
    assert reg.sweep(15.0) == []  # beaten at 2.0: not offline, and still held
    assert reg.hold(record, False, 16.0) is Liveness.ONLINE
    assert record.suspected_by(16.0) is None and record.reachable
    assert seen == ["online", "suspected", "online"]
    assert reg.hold(record, False, 16.5) is None  # no change, no event


def test_silence_still_makes_a_held_agent_offline_and_registering_again_starts_clean() -> None:
    reg = Registry(POLICY)
    record = register(reg, "z", 0.0)
    record.probe = ProbeState(interval=30.0, next_at=30.0)
    reg.hold(record, True, 1.0)
    assert reg.sweep(31.0) == [(record, Liveness.OFFLINE)]
    again = register(reg, "z", 40.0)
    assert again is record and not record.probe_held and record.probe is None
    assert record.state is Liveness.ONLINE


def test_why_an_agent_is_suspected() -> None:
    reg = Registry(POLICY)
    record = register(reg, "a", 0.0)
    assert record.suspected_by(0.0) is None
    reg.sweep(20.5)
    assert record.state is Liveness.SUSPECTED and record.suspected_by(20.5) == "heartbeat"
    beat(reg, record, 21.0)
    reg.deregister(record, 21.0)
    assert record.suspected_by(21.0) == "draining"
    reg.undrain(record, 21.0)
    reg.disconnected(record, 22.0)
    assert record.suspected_by(22.0) == "disconnected"


def test_the_view_says_why_and_shows_its_interval_and_probes() -> None:
    reg = Registry(POLICY)
    record = register(reg, "v", 0.0, interval=20.0)
    view: dict[str, Any] = record.view(1.0)
    assert view["suspected_by"] is None and view["heartbeat_interval_s"] == 20.0
    assert view["probe"] is None
    record.probe = ProbeState(interval=30.0, next_at=30.0)
    reg.hold(record, True, 2.0)
    view = record.view(3.0)
    assert view["suspected_by"] == "probe" and view["state"] == "suspected"
    assert view["probe"]["interval_s"] == 30.0


def test_each_agent_is_judged_on_its_own_interval_bounded() -> None:
    reg = Registry(POLICY)
    default = register(reg, "default", 0.0)
    slow = register(reg, "slow", 0.0, interval=25.0)
    fast = register(reg, "fast", 0.0, interval=0.1)  # floor: a quarter of 10 s
    huge = register(reg, "huge", 0.0, interval=1e5)  # ceiling: 6 × 10 s
    assert default.liveness is POLICY  # the coordinator's own, shared
    assert slow.liveness == LivenessPolicy(25.0, 2.0, 3.0)
    assert fast.liveness.interval == 2.5 and huge.liveness.interval == 60.0
    assert reg.sweep(5.01) == [(fast, Liveness.SUSPECTED)]  # 2 × 2.5 s
    assert {r.name for r, _ in reg.sweep(7.6)} == {"fast"}  # offline after 3 × 2.5 s
    assert fast.state is Liveness.OFFLINE
    assert [r.name for r, _ in reg.sweep(20.01)] == ["default"]
    assert {r.name for r, _ in reg.sweep(30.01)} == {"default"}  # offline at 3 × 10
    assert slow.state is Liveness.ONLINE
    assert [r.name for r, _ in reg.sweep(50.01)] == ["slow"]  # 2 × 25 s
    assert [r.name for r, _ in reg.sweep(75.01)] == ["slow"]  # offline at 3 × 25 s
    assert huge.state is Liveness.ONLINE
    assert [r.name for r, _ in reg.sweep(120.01)] == ["huge"]  # 2 × 60 s


def test_a_beat_keeps_an_agent_of_its_own_interval_online_across_sweeps() -> None:
    reg = Registry(POLICY)
    record = register(reg, "slow", 0.0, interval=40.0)
    for now in range(0, 400, 30):  # a beat every 30 s, sweeps every 5 s
        beat(reg, record, float(now))
        for step in range(6):
            assert reg.sweep(now + step * 5.0) == []
    assert record.state is Liveness.ONLINE


def test_an_unheard_agent_of_its_own_interval_starts_suspected() -> None:
    reg = Registry(POLICY)
    record = register(reg, "late", 0.0, interval=30.0, heard=False)
    assert record.state is Liveness.SUSPECTED and record.suspected_by(0.0) == "heartbeat"
    assert record.last_beat == pytest.approx(-60.0)
    assert reg.sweep(29.9) == []
    assert reg.sweep(30.01) == [(record, Liveness.OFFLINE)]  # 3 × 30 s after that last beat
