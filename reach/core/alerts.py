"""Alert rules and their state machines (pure): when to wake an operator, and when to stop.

A ``Rule`` says what to watch (``kind``), which subjects (capability / agent globs), the
threshold, how long a bad value must last before it pages (``hold``, the file's ``for``) and
how long a good one must last before the page is called off (``clear_for``). Six kinds:

    dead_letters   more than ``threshold`` new dead letters in the last ``window`` seconds
                   (one subject: every capability the rule's filter matches, together)
    breaker_open   an agent's breaker not closed for more than ``threshold`` seconds
                   (a failed half-open probe re-opens it: that is still one open spell)
    p95_latency    a capability's P95 above ``threshold`` ms, or above its declared
                   ``latency_ms`` when the rule names none (undeclared: not watched)
    no_agent       fewer than ``threshold`` (default 1) reachable agents for a capability
    backlog_age    a capability's oldest task waiting its turn older than ``threshold`` s
    undelivered    more than ``threshold`` (default 0) task notifications (completion
                   webhooks, A2A pushes) not delivered now: dead letters of the sender, not
                   yet replayed (one subject: every capability the rule's filter matches)

Each (rule, subject) is a ``Track``: ok → pending (bad, waiting ``hold``) → firing → clearing
(good, waiting ``clear_for``) → ok. Exactly one ``firing`` transition and one ``resolved``
transition per episode, whatever the value does in between. Hysteresis: a value is *bad* past
the threshold but *good* only past ``threshold × (1 ∓ hysteresis)`` (on the healthy side), so
a value hovering at the threshold pages once, not every evaluation. A subject no longer
observed (an agent forgotten) counts as good.

Nothing here reads a clock: ``Evaluator.evaluate(now, readings)`` takes the time and what the
edge observed (``Deaths`` and the ``*_readings`` helpers build those from plain values) and
returns the transitions; the edge (reach.server.alerting) logs and delivers them.
"""

from __future__ import annotations

import enum
import fnmatch
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEAD_LETTERS, BREAKER_OPEN, P95_LATENCY, NO_AGENT, BACKLOG_AGE, UNDELIVERED = (
    "dead_letters", "breaker_open", "p95_latency", "no_agent", "backlog_age", "undelivered")
KINDS = (DEAD_LETTERS, BREAKER_OPEN, P95_LATENCY, NO_AGENT, BACKLOG_AGE, UNDELIVERED)
UNITS = {DEAD_LETTERS: "letters", BREAKER_OPEN: "s", P95_LATENCY: "ms", NO_AGENT: "agents",
         BACKLOG_AGE: "s", UNDELIVERED: "notifications"}
FIRING, RESOLVED = "firing", "resolved"


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule (see the module docstring; docs/alerts.md for the file that holds them).

    ``threshold`` None is allowed only for ``p95_latency`` (each capability's declared
    latency) and ``no_agent`` (1 agent)."""

    name: str
    kind: str
    threshold: float | None = None
    hold: float = 0.0
    clear_for: float = 0.0
    hysteresis: float = 0.0
    window: float = 60.0
    capabilities: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    notify: tuple[str, ...] = ()

    @property
    def above(self) -> bool:
        """Is a value past the threshold bad (True), or one below it (``no_agent``)?"""
        return self.kind != NO_AGENT

    def capability_matches(self, name: str) -> bool:
        return _matches(name, self.capabilities)

    def agent_matches(self, name: str) -> bool:
        return _matches(name, self.agents)


@dataclass(frozen=True, slots=True)
class Reading:
    """One subject's value at one evaluation, and the threshold it is judged by (a
    ``p95_latency`` rule's differs per capability). ``since``: when the condition began, if
    the source knows better than the first evaluation that saw it (a breaker's opening)."""

    capability: str | None
    agent: str | None
    value: float
    threshold: float
    since: float | None = None

    @property
    def key(self) -> tuple[str | None, str | None]:
        return (self.capability, self.agent)


class Phase(enum.Enum):
    OK = "ok"
    PENDING = "pending"
    FIRING = "firing"
    CLEARING = "clearing"


@dataclass(slots=True)
class Track:
    """One subject of one rule: the state machine of the module docstring."""

    rule: Rule
    capability: str | None
    agent: str | None
    phase: Phase = Phase.OK
    # (placeholders: each is set by the transition or the reading that first needs it)
    bad_since: float = 0.0  # pragma: no mutate — set on entering pending, before any read
    good_since: float = 0.0  # pragma: no mutate — set on entering clearing, before any read
    fired_at: float = 0.0  # pragma: no mutate — set on firing; alert() is read only after
    value: float = 0.0  # pragma: no mutate — a track is made for a reading and fed it at once
    threshold: float = 0.0  # pragma: no mutate — as value

    def bad(self, value: float, threshold: float) -> bool:
        return value > threshold if self.rule.above else value < threshold

    def good(self, value: float, threshold: float) -> bool:
        if self.rule.above:
            return value <= threshold * (1.0 - self.rule.hysteresis)
        return value >= threshold * (1.0 + self.rule.hysteresis)

    def step(self, now: float, reading: Reading | None) -> str | None:
        """Feed one evaluation (None: the subject was not observed, which counts as good);
        returns ``FIRING`` or ``RESOLVED`` on a transition, else None."""
        if reading is not None:
            self.value, self.threshold = reading.value, reading.threshold
            bad = self.bad(reading.value, reading.threshold)
            good = self.good(reading.value, reading.threshold)
            started = now if reading.since is None else min(now, reading.since)
        else:
            bad, good, started = False, True, now
        if self.phase is Phase.OK or self.phase is Phase.PENDING:
            if not bad:
                self.phase = Phase.OK
                return None
            if self.phase is Phase.OK:
                self.phase, self.bad_since = Phase.PENDING, started
            if now - self.bad_since >= self.rule.hold:
                self.phase, self.fired_at = Phase.FIRING, now
                return FIRING
            return None
        if not good:  # firing, or clearing interrupted: firing (no second page)
            self.phase = Phase.FIRING
            return None
        if self.phase is Phase.FIRING:
            self.phase, self.good_since = Phase.CLEARING, now
        if now - self.good_since >= self.rule.clear_for:
            self.phase = Phase.OK
            return RESOLVED
        return None

    @property
    def alerting(self) -> bool:
        return self.phase is Phase.FIRING or self.phase is Phase.CLEARING

    def alert(self) -> Alert:
        return Alert(self.rule.name, self.rule.kind, self.capability, self.agent, self.value,
                     self.threshold, self.bad_since, self.fired_at)


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert as an operator reads it: the admin feed's ``AlertView``, a webhook's body."""

    rule: str
    kind: str
    capability: str | None
    agent: str | None
    value: float
    threshold: float
    since: float
    fired_at: float
    state: str = FIRING
    resolved_at: float | None = None

    @property
    def id(self) -> str:
        """Stable per rule and subject: a receiver dedups on it."""
        return f"{self.rule}/{self.capability or '*'}/{self.agent or '*'}"

    def summary(self, now: float) -> str:
        """One line, e.g. ``breaker open 61 s on ledger-writer``."""
        return summary(self.kind, self.capability, self.agent, self.value, self.threshold,
                       now - self.since)

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"id": self.id, "rule": self.rule, "kind": self.kind, "state": self.state,
                "capability": self.capability, "agent": self.agent,
                "value": round(self.value, 3), "threshold": round(self.threshold, 3),
                "unit": UNITS[self.kind], "since": self.since, "fired_at": self.fired_at,
                "resolved_at": self.resolved_at, "summary": self.summary(now)}


def summary(kind: str, capability: str | None, agent: str | None, value: float,
            threshold: float, age: float) -> str:
    """The one-line text of an alert (also what the dashboard's header shows)."""
    if kind == BREAKER_OPEN:
        return f"breaker open {age:.0f} s on {agent}"
    if kind == NO_AGENT:
        return f"no agent for {capability} for {age:.0f} s"
    if kind == P95_LATENCY:
        return f"p95 {value:.0f} ms > {threshold:.0f} ms on {capability}"
    if kind == BACKLOG_AGE:
        return f"a task of {capability} waited {value:.0f} s in the backlog (over " \
               f"{threshold:.0f} s)"
    where = "every capability" if capability in (None, "*") else capability
    if kind == UNDELIVERED:
        return f"{value:.0f} task notifications undelivered (over {threshold:.0f}) on {where}"
    return f"{value:.0f} new dead letters (over {threshold:.0f}) on {where}"


@dataclass(frozen=True, slots=True)
class Transition:
    """A page to send: ``alert.state`` is ``firing`` or ``resolved``; ``at`` is when."""

    alert: Alert
    notify: tuple[str, ...]
    at: float


@dataclass(slots=True)
class Evaluator:
    """Every rule's tracks; ``evaluate`` steps them and returns what changed."""

    rules: tuple[Rule, ...]
    tracks: dict[tuple[str, str | None, str | None], Track] = field(default_factory=dict)

    def evaluate(self, now: float, readings: Mapping[str, Iterable[Reading]]
                 ) -> list[Transition]:
        """``readings``: rule name → this evaluation's readings (a rule left out is not
        judged now). Tracks of subjects not read are stepped as good; a track back to ok
        and unobserved is forgotten, so memory follows what is observed."""
        out: list[Transition] = []
        for rule in self.rules:
            if rule.name not in readings:
                continue
            seen: set[tuple[str | None, str | None]] = set()
            for reading in readings[rule.name]:
                seen.add(reading.key)
                key = (rule.name, *reading.key)
                track = self.tracks.get(key)
                if track is None:
                    track = self.tracks[key] = Track(rule, reading.capability, reading.agent)
                self._step(track, now, reading, out)
            for key, track in list(self.tracks.items()):
                if key[0] == rule.name and key[1:] not in seen:
                    self._step(track, now, None, out)
                    if track.phase is Phase.OK:
                        del self.tracks[key]
        return out

    @staticmethod
    def _step(track: Track, now: float, reading: Reading | None,
              out: list[Transition]) -> None:
        moved = track.step(now, reading)
        if moved is None:
            return
        alert = track.alert()
        if moved == RESOLVED:
            alert = Alert(alert.rule, alert.kind, alert.capability, alert.agent, alert.value,
                          alert.threshold, alert.since, alert.fired_at, RESOLVED, now)
        out.append(Transition(alert, track.rule.notify, now))

    def active(self) -> list[Alert]:
        """Alerts firing now (a clearing one still counts until it resolves), oldest first."""
        found = [t.alert() for t in self.tracks.values() if t.alerting]
        return sorted(found, key=lambda a: (a.fired_at, a.id))


# ---------------------------------------------------------------- readings from plain values

class OpenSpells:
    """Since when each agent's breaker has been not closed: a failed probe re-opens a breaker
    with a new ``opened_at``, but for an operator it never closed."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def update(self, breakers: Mapping[str, tuple[bool, float]]) -> dict[str, float]:
        """``breakers``: agent → (closed?, opened_at). Returns agent → open since, for the
        agents whose breaker is not closed."""
        for agent, (closed, opened_at) in breakers.items():
            if closed:
                self.since.pop(agent, None)
            else:
                self.since.setdefault(agent, opened_at)
        for agent in [a for a in self.since if a not in breakers]:
            del self.since[agent]
        return dict(self.since)


def breaker_readings(rule: Rule, open_since: Mapping[str, float],
                     capabilities: Mapping[str, Iterable[str]], now: float) -> list[Reading]:
    """One reading per matching agent with a breaker not closed: the seconds it has been so.
    ``capabilities``: agent → what it declares (for the rule's capability filter)."""
    out = []
    for agent, since in open_since.items():
        if not rule.agent_matches(agent):
            continue
        if rule.capabilities and not any(rule.capability_matches(c)
                                         for c in capabilities.get(agent, ())):
            continue
        out.append(Reading(None, agent, now - since, _threshold(rule), since))
    return out


class Deaths:
    """Dead letters each ``dead_letters`` rule has seen die within its window, fed one letter
    at a time as the edge finds new ones (so a reading costs what died or expired since the
    last, not a pass over every letter)."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = [r for r in rules if r.kind == DEAD_LETTERS]
        self.times: dict[str, deque[float]] = {r.name: deque() for r in self.rules}

    @property
    def window(self) -> float:
        """The longest window of any rule: letters older than this matter to none."""
        return max((r.window for r in self.rules), default=0.0)

    def add(self, capability: str, agents: Iterable[str], died: float) -> None:
        """One letter, oldest first: ``agents`` made attempts at it, ``died`` is when."""
        tried = tuple(agents)
        for rule in self.rules:
            if not rule.capability_matches(capability):
                continue
            if rule.agents and not any(rule.agent_matches(a) for a in tried):
                continue
            self.times[rule.name].append(died)

    def readings(self, rule: Rule, now: float) -> list[Reading]:
        """One reading: how many letters the rule's filters match died within its window."""
        times = self.times[rule.name]
        while times and times[0] < now - rule.window:
            times.popleft()
        label = ",".join(rule.capabilities) or "*"
        return [Reading(label, None, float(len(times)), _threshold(rule))]


def latency_readings(rule: Rule, p95_ms: Mapping[str, float | None],
                     declared_ms: Mapping[str, float | None]) -> list[Reading]:
    """One reading per matching capability that has a P95 and a threshold: the rule's, or
    the capability's declared latency (None: undeclared, so not watched)."""
    out = []
    for capability, p95 in p95_ms.items():
        if p95 is None or not rule.capability_matches(capability):
            continue
        limit = rule.threshold if rule.threshold is not None else declared_ms.get(capability)
        if limit is None:
            continue
        out.append(Reading(capability, None, p95, float(limit)))
    return out


def agent_readings(rule: Rule, reachable: Mapping[str, int]) -> list[Reading]:
    """One reading per watched capability: how many agents could take its work now.
    ``reachable`` covers every capability known; a name the rule spells out exactly (no
    glob) is watched even if no agent ever declared it."""
    wanted = dict(reachable)
    for pattern in rule.capabilities:
        if not any(ch in pattern for ch in "*?["):
            wanted.setdefault(pattern, 0)
    return [Reading(cap, None, float(n), _threshold(rule))
            for cap, n in sorted(wanted.items()) if rule.capability_matches(cap)]


def backlog_readings(rule: Rule, oldest: Mapping[str, float], now: float) -> list[Reading]:
    """One reading per matching capability with tasks waiting their turn: the oldest one's
    age in seconds (``oldest``: capability → that age), bad since it crossed the threshold."""
    limit = _threshold(rule)
    return [Reading(cap, None, age, limit, now - age + limit if age > limit else None)
            for cap, age in sorted(oldest.items()) if rule.capability_matches(cap)]


def undelivered_readings(rule: Rule, capabilities: Iterable[str]) -> list[Reading]:
    """One reading: how many undelivered notifications (one capability per letter, of the
    task it tells about) the rule's filter matches. Default threshold 0: any one is bad,
    and the alert resolves once none is left (replayed, or delivered)."""
    count = sum(1 for cap in capabilities if rule.capability_matches(cap))
    limit = 0.0 if rule.threshold is None else float(rule.threshold)
    return [Reading(",".join(rule.capabilities) or "*", None, float(count), limit)]


def _threshold(rule: Rule) -> float:
    return 1.0 if rule.threshold is None else float(rule.threshold)
