"""Alerting on an injected clock: a real ``Gateway`` and ``Registry`` on fakes, time moved by
hand (``ManualClock``), so a rule's hold, a breaker's open spell and a webhook's retry backoff
are exact to the evaluation, without a sleep."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from reach.alert_rules import AlertConfig, Webhook
from reach.config import Settings
from reach.core import alerts as al
from reach.core.backoff import Backoff
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.routing import Router
from reach.core.tasks import Attempt, Envelope, Task, TaskState
from reach.gateway.gateway import Gateway
from reach.server.alerting import Alerting
from reach.testing import FakeAgentLink, ManualClock, MemoryStore
from reach.wire.protocol import CapabilitySpec


def rig(*rules: al.Rule, hooks: tuple[Webhook, ...] = ()) -> tuple[Alerting, ManualClock,
                                                                   Registry]:
    clock = ManualClock()
    registry = Registry(LivenessPolicy(interval=10.0), breaker_open_for=5.0)
    gateway = Gateway(Settings(), registry, Router(rng=random.Random(1)), MemoryStore(), clock,
                      random.Random(2))
    alerting = Alerting(AlertConfig(rules, hooks, interval=1.0), gateway, registry, clock,
                        random.Random(3), lambda: "ws://coordinator")
    return alerting, clock, registry


async def test_a_rule_fires_on_the_evaluation_its_hold_ends_and_not_before() -> None:
    alerting, clock, registry = rig(
        al.Rule("nobody", al.NO_AGENT, capabilities=("l.write",), hold=5.0, clear_for=2.0))
    alerting.start()
    try:
        await clock.advance(5.0)  # first seen bad at t=1: the hold ends at t=6
        assert alerting.ticks == 5 and alerting.active() == []
        await clock.advance(1.0)
        [alert] = alerting.active()
        assert alert["fired_at"] - alert["since"] == 5.0
        registry.register(agent_id="a1", name="w", version="1", max_concurrency=1,
                          specs=[CapabilitySpec(name="l.write")], link=FakeAgentLink(),
                          now=clock.wall())
        await clock.advance(2.0)  # good at t=7 and t=8: still clearing
        assert len(alerting.active()) == 1
        await clock.advance(1.0)
        assert alerting.active() == []
    finally:
        await alerting.close()


async def test_a_breaker_open_spell_counts_from_its_first_opening_across_failed_probes() -> None:
    alerting, clock, registry = rig(al.Rule("stuck", al.BREAKER_OPEN, threshold=12.0))
    record = registry.register(agent_id="a1", name="w", version="1", max_concurrency=1,
                               specs=[CapabilitySpec(name="x.y")], link=FakeAgentLink(),
                               now=clock.wall()).record
    for _ in range(5):
        record.breaker.record(False, clock.wall())
    opened = record.breaker.opened_at
    alerting.start()
    try:
        await clock.advance(6.0)  # the breaker's 5 s are over: a probe, which fails
        record.breaker.on_dispatch(clock.wall())
        record.breaker.record(False, clock.wall())
        assert record.breaker.opened_at == opened + 6.0
        await clock.advance(6.0)
        assert alerting.active() == []  # open 12 s: not more than the threshold yet
        await clock.advance(1.0)
        [alert] = alerting.active()
        assert (alert["agent"], alert["since"], alert["value"]) == ("w", opened, 13.0)
        record.breaker.reset()
        await clock.advance(1.0)
        assert alerting.active() == []
    finally:
        await alerting.close()


async def test_webhook_retries_wait_their_backoff_on_the_clock() -> None:
    # Nothing listens at this address's discard port: each try fails at once, and the wait
    # between tries is the backoff on the manual clock (full jitter below 4 s, 8 s).
    hook = Webhook("h", "http://127.0.0.1:9/", attempts=3,
                   backoff=Backoff(base=4.0, factor=2.0, cap=60.0, jitter=0.0, mode="below"))
    alerting, clock, _ = rig(al.Rule("nobody", al.NO_AGENT, capabilities=("l.write",)),
                             hooks=(hook,))
    sender = alerting.senders["h"]
    alerting.start()
    try:
        await clock.advance(1.0)
        await _until(lambda: sender.counts.attempts == 1)
        await clock.advance(3.9)
        await asyncio.sleep(0.05)  # (real time for a stray try to show; none may)
        assert sender.counts.attempts == 1
        await clock.advance(0.1)
        await _until(lambda: sender.counts.attempts == 2)
        await clock.advance(8.0)
        await _until(lambda: sender.counts.failed == 1)
        assert (sender.counts.attempts, sender.counts.delivered) == (3, 0)
    finally:
        await alerting.close()


async def _until(predicate: Callable[[], bool]) -> None:
    """Let real socket I/O (a refused connection) finish without moving the manual clock."""
    async with asyncio.timeout(5):
        while not predicate():
            await asyncio.sleep(0.005)


def letter(task_id: str, capability: str, died: float, agent: str | None = None) -> Task:
    task = Task(Envelope(task_id, "trace", capability, {}, "caller", f"key-{task_id}"),
                state=TaskState.DEAD, updated_at=died)
    if agent is not None:
        task.attempts.append(Attempt(1, "id-" + agent, agent, died - 1.0))
    return task


async def test_dead_letters_are_counted_once_as_they_die_not_rescanned() -> None:
    alerting, clock, _ = rig(al.Rule("letters", al.DEAD_LETTERS, threshold=2, window=10.0),
                             al.Rule("w2", al.DEAD_LETTERS, threshold=0, window=10.0,
                                     agents=("w2",)))
    dead = alerting.gateway.dead
    t0 = clock.wall()
    dead["old"] = letter("old", "a.b", t0 - 30.0)  # before every window: the scan stops here
    dead["l1"] = letter("l1", "a.b", t0 - 1.0, agent="w2")
    dead["l2"] = letter("l2", "a.b", t0 - 0.5)
    assert [len(alerting.observe(t0)[r][0:1]) for r in ("letters", "w2")] == [1, 1]
    assert alerting.deaths.times == {"letters": al.deque([t0 - 1.0, t0 - 0.5]),
                                     "w2": al.deque([t0 - 1.0])}
    assert alerting.observe(t0)["letters"][0].value == 2.0  # the same letters: not again
    replaying = letter("l3", "a.b", t0 + 0.2)
    replaying.state = TaskState.RUNNING  # a letter being replayed is passed over
    dead["l3"] = replaying
    dead["l4"] = letter("l4", "a.b", t0 + 0.1)
    assert alerting.observe(t0 + 1.0)["letters"][0].value == 3.0
    # l1 replayed, resolved (it leaves the map) and dead again: it joins the end, counted anew
    del dead["l1"]
    dead["l1"] = letter("l1", "a.b", t0 + 2.0)
    dead["l5"] = letter("l5", "a.b", t0 + 2.5)
    assert alerting.observe(t0 + 3.0)["letters"][0].value == 5.0
    assert list(alerting._recorded) == ["l2", "l4", "l1", "l5"]
    assert alerting.observe(t0 + 10.4)["letters"][0].value == 2.0  # t0+0.1 and before: past
    assert list(alerting._recorded) == ["l1", "l5"]
    dead["l6"] = letter("l6", "a.b", t0 + 3.0)
    [moved] = alerting.tick()  # three letters in the window now: more than 2
    assert (moved.alert.rule, moved.alert.state, moved.alert.value) == ("letters", "firing",
                                                                         3.0)
