"""Alerting at the edge: observe the coordinator on a timer, judge with the rules, tell people.

Every ``interval`` (the rules file's ``[alerts]``) ``tick`` reads what the coordinator already
knows — dead letters, breakers, per-capability P95 and declared latencies, which agents are
reachable, task notifications not delivered (the sender's letters) — into plain readings
(dead letters incrementally: only those new since the last evaluation are read), lets the
pure ``reach.core.alerts.Evaluator`` decide, and for each transition: logs one line (logger
``reach.alerts``), publishes an ``alert`` event (so ``json_logs`` writes it as a JSON line
and the admin feed sends a delta at once) and queues a webhook notification per target
(``reach.server.alerts_out``). Reading costs a pass over the agents and the new dead
letters; nothing here awaits while it reads.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from reach.alert_rules import AlertConfig
from reach.core import alerts as al
from reach.core.registry import Registry
from reach.core.resilience import BreakerState
from reach.core.tasks import TaskState
from reach.gateway.gateway import Gateway
from reach.ports import Clock
from reach.server.alerts_out import WebhookSender

log = logging.getLogger("reach.alerts")
ALERT = "alert"  # the event kind on the coordinator's event bus


class Alerting:
    """One coordinator's alert rules, their state and their webhooks."""

    def __init__(self, config: AlertConfig, gateway: Gateway, registry: Registry,
                 clock: Clock, rng: random.Random, url: Callable[[], str],
                 undelivered: Callable[[], Iterable[str]] = tuple) -> None:
        self.config = config
        self.undelivered = undelivered  # the capabilities of the notifications not delivered
        self.gateway = gateway
        self.registry = registry
        self.clock = clock
        self.url = url
        self.evaluator = al.Evaluator(config.rules)
        self.spells = al.OpenSpells()
        self.deaths = al.Deaths(config.rules)
        self._recorded: dict[str, float] = {}  # letter → when it died, as counted
        self.senders = {h.name: WebhookSender(h, clock, rng, config.queue)
                        for h in config.webhooks}
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.ticks = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the evaluation loop and one worker per webhook (inside the running loop)."""
        loop = asyncio.get_running_loop()
        self._session = aiohttp.ClientSession()
        self._tasks.append(loop.create_task(self._loop(), name="reach-alerts"))
        for name, sender in self.senders.items():
            self._tasks.append(loop.create_task(sender.run(self._session),
                                                name=f"reach-alerts-{name}"))

    async def close(self) -> None:
        """Stop evaluating and delivering; what is still queued is logged as lost."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        left = sum(s.queued for s in self.senders.values())
        if left:
            log.warning("%d alert notification(s) not delivered: the coordinator stopped", left)

    async def _loop(self) -> None:
        while True:
            await self.clock.sleep(self.config.interval)
            try:
                self.tick()
            except Exception:  # a bug here must not end alerting for good
                log.exception("alert evaluation failed")

    # ------------------------------------------------------------ evaluation

    def tick(self) -> list[al.Transition]:
        """One evaluation: observe, judge, announce; returns the transitions."""
        self.ticks += 1
        now = self.clock.wall()
        transitions = self.evaluator.evaluate(now, self.observe(now))
        for t in transitions:
            self._announce(t)
        return transitions

    def observe(self, now: float) -> dict[str, list[al.Reading]]:
        """Every rule's readings now, from the gateway's and the registry's memory."""
        kinds = {r.kind for r in self.config.rules}
        records = list(self.registry.by_id.values())
        out: dict[str, list[al.Reading]] = {}
        spells: dict[str, float] = {}
        declared: dict[str, list[str]] = {}
        reachable: dict[str, int] = {}
        if al.BREAKER_OPEN in kinds:
            spells = self.spells.update({
                r.name: (r.breaker.state is BreakerState.CLOSED, r.breaker.opened_at)
                for r in records})
            declared = {r.name: list(r.capabilities) for r in records}
        if al.DEAD_LETTERS in kinds:
            self._count_deaths(now)
        if al.NO_AGENT in kinds:
            reachable = dict.fromkeys(self.gateway.known, 0)
            for record in records:
                up = record.reachable and not record.draining
                for cap in record.capabilities:
                    reachable[cap] = reachable.get(cap, 0) + up
        for rule in self.config.rules:
            if rule.kind == al.BREAKER_OPEN:
                out[rule.name] = al.breaker_readings(rule, spells, declared, now)
            elif rule.kind == al.DEAD_LETTERS:
                out[rule.name] = self.deaths.readings(rule, now)
            elif rule.kind == al.NO_AGENT:
                out[rule.name] = al.agent_readings(rule, reachable)
            elif rule.kind == al.UNDELIVERED:
                out[rule.name] = al.undelivered_readings(rule, self.undelivered())
            elif rule.kind == al.BACKLOG_AGE:
                oldest = {cap: age for cap, (_, age) in self.gateway.book.backlog.view(now).items()}
                out[rule.name] = al.backlog_readings(rule, oldest, now)
            else:
                out[rule.name] = self._latency(rule)
        return out

    def _count_deaths(self, now: float) -> None:
        """Feed ``deaths`` the letters that died since the last evaluation. New letters join
        the end of the gateway's (insertion-ordered) map, so the scan walks back from the end
        and stops at the first letter already counted at the same time, or one older than
        every window: a few letters a tick, not all 10,000. A letter replayed and dead again
        in its old place is not counted twice; one being replayed is passed over."""
        horizon = now - self.deaths.window
        fresh = []
        for task in reversed(self.gateway.dead.values()):
            if task.state is not TaskState.DEAD:
                continue
            died = task.updated_at
            if died < horizon or self._recorded.get(task.task_id) == died:
                break
            fresh.append(task)
        for task in reversed(fresh):
            self._recorded.pop(task.task_id, None)  # (re-inserted: the map stays in order)
            self._recorded[task.task_id] = task.updated_at
            self.deaths.add(task.envelope.capability,
                            [a.agent for a in task.attempts if a.agent], task.updated_at)
        while self._recorded:
            first = next(iter(self._recorded))
            if self._recorded[first] >= horizon:
                break
            del self._recorded[first]

    def _latency(self, rule: al.Rule) -> list[al.Reading]:
        # Percentiles sort a window: only for the capabilities this rule can judge.
        p95: dict[str, float | None] = {}
        declared: dict[str, float | None] = {}
        for cap, series in self.gateway.metrics.capabilities.items():
            if not rule.capability_matches(cap):
                continue
            limits = [c.spec.latency_ms for r in (self.registry.index.get(cap) or {}).values()
                      if (c := r.capabilities.get(cap)) is not None
                      and c.spec.latency_ms is not None]
            declared[cap] = max(limits) if limits else None
            if rule.threshold is not None or declared[cap] is not None:
                p95[cap] = series.quantile(0.95)
        return al.latency_readings(rule, p95, declared)

    def _announce(self, t: al.Transition) -> None:
        body = {"v": 1, "coordinator": self.url(), "at": t.at, **t.alert.to_dict(t.at)}
        log.warning("alert %s: %s (rule %s)", t.alert.state, body["summary"], t.alert.rule)
        self.gateway.events.publish(ALERT, body)
        for name in t.notify or self.senders:
            self.senders[name].post(body)

    # ------------------------------------------------------------ reading

    def active(self) -> list[dict[str, Any]]:
        """Alerts firing now, as the admin feed's ``AlertView``, oldest first."""
        now = self.clock.wall()
        return [a.to_dict(now) for a in self.evaluator.active()]

    def stats(self) -> list[dict[str, Any]]:
        """Per webhook: queued, delivered, failed, dropped, attempts."""
        return [s.stats() for s in self.senders.values()]
