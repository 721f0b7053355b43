"""The registry at its edges: an agent registered before any sign of life (``heard=False``),
a re-registration that moves its next liveness look earlier (the old look is skipped), the
clock going back over such a stale look, and a declaration with more renamed capabilities
than warnings are listed for."""

from __future__ import annotations

from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.registry import MAX_WARNINGS, Registry
from reach.wire.protocol import CapabilitySpec

POLICY = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)


def register(reg: Registry, now: float, *, heard: bool = True,
             names: tuple[str, ...] = ("x.work",)) -> object:
    return reg.register(agent_id="id-a", name="a", version="1", max_concurrency=2,
                        specs=[CapabilitySpec(name=n) for n in names], link=None, now=now,
                        heard=heard)


def test_an_agent_not_heard_from_yet_starts_suspected_and_its_first_beat_brings_it_online(
        ) -> None:
    reg = Registry(POLICY)
    record = register(reg, 0.0, heard=False).record  # type: ignore[attr-defined]
    assert record.state is Liveness.SUSPECTED and not record.reachable
    assert reg.heartbeat(record, 1.0, inflight=0, queue_depth=0, load=0.0) is Liveness.ONLINE


def test_a_look_moved_earlier_is_taken_then_the_stale_one_is_skipped() -> None:
    reg = Registry(POLICY)
    record = register(reg, 0.0).record  # type: ignore[attr-defined]
    assert record.state is Liveness.ONLINE and record.due is not None and record.due >= 20.0
    register(reg, 5.0, heard=False)  # again, as not heard from: its offline look is earlier
    assert record.state is Liveness.SUSPECTED and record.due < 20.0
    assert reg.sweep(16.0) == [(record, Liveness.OFFLINE)]
    assert reg.sweep(21.0) == []  # the look filed at 20 s is stale: skipped, not re-judged
    assert record.state is Liveness.OFFLINE and record.due is None


def test_the_clock_going_back_refiles_only_looks_still_due() -> None:
    reg = Registry(POLICY)
    record = register(reg, 0.0).record  # type: ignore[attr-defined]
    register(reg, 5.0, heard=False)
    assert reg.sweep(16.0) == [(record, Liveness.OFFLINE)]
    stale = sum(len(v) for v in reg._wheel.values())
    assert stale >= 1  # the look filed for 20 s is still on the wheel
    assert reg.sweep(1.0) == []  # the clock went back: the wheel is re-filed
    assert sum(len(v) for v in reg._wheel.values()) == 0  # the stale look was dropped
    assert record.state is Liveness.OFFLINE


def test_renamed_capabilities_past_the_warning_limit_are_counted_not_listed() -> None:
    reg = Registry(POLICY)
    names = tuple(f"Area{i}.Work" for i in range(MAX_WARNINGS + 5))
    warnings = register(reg, 0.0, names=names).warnings  # type: ignore[attr-defined]
    assert len(warnings) == MAX_WARNINGS + 1
    assert warnings[0] == "capability 'Area0.Work' registered as 'area0.work'"
    assert warnings[-1].startswith("... and ") and warnings[-1].endswith(" more warnings")
    assert sorted(reg.index) == sorted(n.lower() for n in names)
