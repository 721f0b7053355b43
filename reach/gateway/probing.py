"""The probe scheduler: sends each probed agent its probes, times the answers, applies verdicts.

The rule is reach.core.probes'; this is its loop on the injected clock. Whatever carries an
agent's work carries its probes: a websocket session sends a ``probe`` frame and hands back the
agent's ``probe_result`` (reach.server.agent_session), an adapter runs its health check
(reach.adapters.base). Both are a ``ProbeLink``; the times are taken here, on the
coordinator's clock, so an agent cannot report itself fast. A verdict that suspects or
restores an agent goes to the registry (``Registry.hold``) and out as a ``probe`` event (the
JSON log line and the admin feed's delta).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Hashable
from typing import Protocol

from reach.config import Settings
from reach.core.agents import AgentRecord
from reach.core.probes import ProbeBook, ProbePolicy, Verdict, bounded, slow_call
from reach.core.registry import Registry
from reach.gateway.clock import within
from reach.gateway.events import PROBE, EventBus
from reach.ports import Clock

log = logging.getLogger("reach.probes")
# An agent's own probe interval is kept within these multiples of ``Settings.probe_interval``:
# the field saw 5 s probes overload a JVM's GC and 60 s ones catch only 30 % of zombies.
LOW, HIGH = 1 / 6, 4.0
IDLE = 3600.0  # how long the loop sleeps with nothing to probe (a ``track`` wakes it)


class ProbeLink(Protocol):
    """A link that can carry a probe: send probe ``probe_id`` (False: it cannot now); the
    answer comes back through ``Probes.answered``."""

    def probe(self, probe_id: int) -> bool: ...


class Probes:
    """Every probed agent's schedule (a ``ProbeBook``) and the link its probes go through."""

    def __init__(self, settings: Settings, registry: Registry, clock: Clock,
                 events: EventBus) -> None:
        self.settings = settings
        self.registry = registry
        self.clock = clock
        self.events = events
        self.book = ProbeBook(ProbePolicy(settings.probe_interval, settings.probe_slow))
        self.links: dict[Hashable, ProbeLink] = {}
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()

    def interval_for(self, asked: float | None) -> float:
        """The probe interval an agent that asks for ``asked`` gets (None: the default)."""
        return bounded(asked, self.settings.probe_interval, LOW, HIGH)

    # ------------------------------------------------------------ links come and go

    def track(self, record: AgentRecord, link: ProbeLink, asked: float | None = None, *,
              exact: bool = False) -> float:
        """Probe ``record`` through ``link`` from now on; returns the interval granted
        (``exact``: ``asked`` as it is, for an adapter whose checks are its beats)."""
        every = asked if exact and asked is not None else self.interval_for(asked)
        record.probe = self.book.track(record.agent_id, self.clock.now(), every)
        self.links[record.agent_id] = link
        self._wake.set()
        return every

    def forget(self, record: AgentRecord, link: ProbeLink) -> None:
        """``link`` no longer carries ``record``'s work (closed, replaced, detached)."""
        if self.links.get(record.agent_id) is link:
            del self.links[record.agent_id]
            self.book.forget(record.agent_id)

    # ------------------------------------------------------------ what the links report

    def answered(self, record: AgentRecord, link: ProbeLink, probe_id: int, ok: bool = True,
                 detail: str = "") -> bool:
        """The agent's answer to probe ``probe_id``; False when no such probe is awaited from
        it through ``link`` (the session answers that with a ``protocol_error``)."""
        if self.links.get(record.agent_id) is not link:
            return False
        verdict = self.book.answered(record.agent_id, probe_id, self.clock.now(), ok, detail)
        if verdict is None:
            return False
        if not verdict.late:
            self._stamp(record)
        if verdict.news:  # once per change of the failure, not once per probe
            words = None if record.probe is None else record.probe.failing
            if words is None:
                log.info("agent %s: its check passes again (probe %d)", record.name, probe_id)
            else:
                log.info("agent %s: probe %d failed: %s (not logged again until this "
                         "changes)", record.name, probe_id, words)
        self._apply(record, verdict, detail)
        self._wake.set()
        return True

    def call_ended(self, record: AgentRecord, latency_ms: float | None, took: float,
                   timed_out: bool) -> None:
        """A call at ``record`` ended after ``took`` s: a slow one makes a probe due now."""
        if record.agent_id in self.links and slow_call(took, latency_ms, timed_out,
                                                       self.settings.probe_slow_call):
            self.book.slow_call(record.agent_id, self.clock.now())
            self._wake.set()

    # ------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Send probes as they fall due and judge the unanswered ones (until cancelled)."""
        while True:
            self.tick(self.clock.now())
            at = self.book.next_at()
            delay = IDLE if at is None else max(0.0, at - self.clock.now())
            self._wake.clear()
            if delay > 0:
                await within(self.clock, self._wake.wait(), delay)
            else:
                await asyncio.sleep(0)

    def tick(self, now: float) -> None:
        """One look: probes due are sent, probes unanswered past ``probe_slow`` judged."""
        by_id = self.registry.by_id

        def busy(key: Hashable) -> bool:
            # (An adapter's check takes no handler slot, and is its beat: never put off.)
            record = by_id.get(str(key))
            return record is not None and record.kind == "websocket" and \
                record.inflight >= record.max_concurrency

        send, verdicts = self.book.due(now, busy)
        for key, verdict in verdicts:
            record = by_id.get(str(key))
            if record is not None:  # pragma: no branch — forgotten agents leave the book
                self._stamp(record)
                self._apply(record, verdict, "unanswered")
        for key in send:
            record, link = by_id.get(str(key)), self.links.get(key)
            held: object = None if record is None else record.link
            if record is None or link is None or held is not link:
                self.book.forget(key)  # the link is gone; its new one tracks it afresh
                self.links.pop(key, None)
                continue
            probe_id = next(self._ids)
            if link.probe(probe_id):
                self.book.sent(key, probe_id, now)

    def _stamp(self, record: AgentRecord) -> None:
        """The book judges on the monotonic clock; an agent's view is read against the wall
        clock (``ago_s`` came out as ~1.8e9 s): the time of the last judgement is kept on it."""
        if record.probe is not None:
            record.probe.last_at = self.clock.wall()

    def _apply(self, record: AgentRecord, verdict: Verdict, detail: str) -> None:
        if verdict.change is None:
            return
        held = verdict.change == "suspect"
        self.registry.hold(record, held, self.clock.wall())
        state = record.probe
        streak = 0 if state is None else state.streak
        if held:
            log.warning("agent %s suspected by its probes: %d slow in a row (last: %s)",
                        record.name, streak, "unanswered" if verdict.ms is None
                        else f"{verdict.ms:.0f} ms, {detail or 'ok'}")
        else:
            log.info("agent %s restored by a fast probe (%.1f ms)", record.name,
                     verdict.ms or 0.0)
        self.events.publish(PROBE, {
            "agent": record.name, "agent_id": record.agent_id,
            "change": "suspected" if held else "restored", "probe_ms": verdict.ms,
            "slow_streak": streak, "state": record.state.value})
