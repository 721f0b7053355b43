"""The probe scheduler (reach.gateway.probing) on a manual clock: it sends probes through each
agent's link as they fall due, times the answers on the coordinator's clock, holds and
releases agents through the registry, publishes ``probe`` events, and drops links that no
longer carry their agent; a slow call makes a probe due at once."""

from __future__ import annotations

import asyncio
from typing import Any

from reach.config import Settings
from reach.core.agents import AgentRecord
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.registry import Registry
from reach.gateway.events import PROBE, Event, EventBus
from reach.gateway.probing import IDLE, Probes
from reach.testing import ManualClock
from reach.wire.protocol import CapabilitySpec


class Link:
    """A ``ProbeLink`` that records the probes it was given."""

    def __init__(self, accepts: bool = True) -> None:
        self.accepts = accepts
        self.sent: list[int] = []

    def probe(self, probe_id: int) -> bool:
        if self.accepts:
            self.sent.append(probe_id)
        return self.accepts


def setup(**settings: Any) -> tuple[Probes, Registry, ManualClock, list[Event]]:
    clock = ManualClock()
    s = Settings(**{"probe_interval": 1.0, "probe_slow": 0.2, "heartbeat_interval": 100.0,
                    **settings})
    registry = Registry(LivenessPolicy(s.heartbeat_interval))
    events = EventBus(clock)
    seen: list[Event] = []
    events.listen(lambda e: seen.append(e) if e.kind == PROBE else None)
    return Probes(s, registry, clock, events), registry, clock, seen


def at(probes: Probes, clock: ManualClock, now: float) -> None:
    """Move the manual clock to ``now`` (no timers involved) and look."""
    clock._now = now
    probes.tick(now)


def agent(registry: Registry, clock: ManualClock, link: Any, name: str = "a",
          kind: str = "websocket", max_concurrency: int = 2) -> AgentRecord:
    return registry.register(agent_id=f"id-{name}", name=name, version="1",
                             max_concurrency=max_concurrency,
                             specs=[CapabilitySpec(name="x.work", latency_ms=100)], link=link,
                             now=clock.wall(), kind=kind).record


def test_probes_are_sent_when_due_and_fast_answers_keep_the_agent() -> None:
    probes, registry, clock, seen = setup()
    link = Link()
    record = agent(registry, clock, link)
    assert probes.track(record, link) == 1.0 and record.probe is not None
    at(probes, clock, 0.5)
    assert link.sent == []
    at(probes, clock, 1.0)
    assert link.sent == [1]
    assert probes.answered(record, link, 1, True)
    assert record.probe.last_ok is True and record.probe.last_ms == 0.0
    assert not probes.answered(record, link, 1, True)  # answered already
    assert not probes.answered(record, Link(), 2, True)  # not through its link
    assert seen == [] and record.state is Liveness.ONLINE


async def test_unanswered_probes_suspect_a_fast_one_restores_and_events_say_so() -> None:
    probes, registry, clock, seen = setup()
    link = Link()
    record = agent(registry, clock, link)
    probes.track(record, link)
    runner = asyncio.ensure_future(probes.run())
    try:
        await clock.advance(1.0)
        assert link.sent == [1]
        await clock.advance(0.2)  # unanswered within probe_slow: slow, and probe again
        assert link.sent == [1, 2] and record.state is Liveness.ONLINE
        await clock.advance(0.2)
        assert record.state is Liveness.SUSPECTED and record.probe_held
        assert [e.data["change"] for e in seen] == ["suspected"]
        assert seen[0].data == {"agent": "a", "agent_id": "id-a", "change": "suspected",
                                "probe_ms": None, "slow_streak": 2, "state": "suspected"}
        await clock.advance(5.0)
        assert link.sent == [1, 2]  # two unanswered: no third
        assert probes.answered(record, link, 1)  # late: frees a place, next one at once
        await clock.advance(0.0)
        assert link.sent == [1, 2, 3] and record.state is Liveness.SUSPECTED
        await clock.advance(0.05)
        assert probes.answered(record, link, 3)
        assert record.state is Liveness.ONLINE and not record.probe_held
        assert [e.data["change"] for e in seen] == ["suspected", "restored"]
        assert seen[1].data["probe_ms"] == 50.0
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def test_a_failed_check_is_slow_and_two_suspect() -> None:
    probes, registry, clock, seen = setup()
    link = Link()
    record = agent(registry, clock, link)
    probes.track(record, link)
    at(probes, clock, 1.0)
    assert probes.answered(record, link, 1, False, "disk full")
    at(probes, clock, 1.0)
    assert link.sent == [1, 2]
    assert probes.answered(record, link, 2, False, "disk full")
    assert record.probe_held and seen[-1].data["change"] == "suspected"


def test_a_slow_call_makes_a_probe_due_now() -> None:
    probes, registry, clock, _ = setup()
    link = Link()
    record = agent(registry, clock, link)
    probes.call_ended(record, 100.0, 5.0, False)  # not tracked: nothing
    probes.track(record, link)
    probes.call_ended(record, 100.0, 0.2, False)  # 2× its latency: not slow (3×)
    at(probes, clock, 0.0)
    assert link.sent == []
    probes.call_ended(record, 100.0, 0.05, True)  # a timeout
    at(probes, clock, 0.0)
    assert link.sent == [1]


def test_a_full_websocket_agent_is_probed_later_an_adapter_never_put_off() -> None:
    probes, registry, clock, _ = setup()
    ws_link, adapter_link = Link(), Link()
    busy = agent(registry, clock, ws_link, "busy", max_concurrency=1)
    adapter = agent(registry, clock, adapter_link, "adapter", kind="http", max_concurrency=1)
    for record, link in ((busy, ws_link), (adapter, adapter_link)):
        probes.track(record, link)
        record.inflight = 1
    at(probes, clock, 1.0)
    assert ws_link.sent == [] and adapter_link.sent == [1]
    busy.inflight = 0
    at(probes, clock, 1.2)  # put off by probe_slow
    assert ws_link.sent == [2]


def test_links_that_no_longer_carry_their_agent_are_dropped() -> None:
    probes, registry, clock, _ = setup()
    old, new = Link(), Link()
    record = agent(registry, clock, old)
    probes.track(record, old)
    record.link = new  # replaced without the old link forgetting it
    at(probes, clock, 1.0)
    assert old.sent == [] and "id-a" not in probes.links
    probes.track(record, new)
    probes.forget(record, old)  # not its link: nothing happens
    assert probes.links["id-a"] is new
    refusing = Link(accepts=False)
    record.link = refusing
    probes.track(record, refusing)
    at(probes, clock, 2.0)  # the link cannot carry it now: not counted as sent
    assert record.probe is not None and record.probe.sent == 0
    probes.forget(record, refusing)
    assert probes.links == {} and probes.book.next_at() is None
    registry.by_id.clear()
    probes.track(record, refusing)
    at(probes, clock, 10.0)  # an agent the registry forgot
    assert probes.links == {}


def test_intervals_asked_for_are_bounded_unless_exact() -> None:
    probes, registry, clock, _ = setup(probe_interval=30.0)
    link = Link()
    record = agent(registry, clock, link)
    assert probes.interval_for(None) == 30.0
    assert probes.interval_for(1.0) == 5.0 and probes.interval_for(1e4) == 120.0
    assert probes.track(record, link, 0.05, exact=True) == 0.05
    assert probes.track(record, link, None, exact=True) == 30.0


async def test_the_loop_sleeps_until_woken_with_nothing_to_probe() -> None:
    probes, registry, clock, _ = setup()
    runner = asyncio.ensure_future(probes.run())
    try:
        await clock.advance(0.0)
        assert clock.pending() == 1  # one long wait (IDLE)
        link = Link()
        probes.track(agent(registry, clock, link), link)  # wakes it
        await clock.advance(1.0)
        assert link.sent == [1] and IDLE > 1.0
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
