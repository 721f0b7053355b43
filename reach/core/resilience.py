"""Resilience decisions (pure): per-agent breaker, adaptive timeouts, retry budget, pacing.

Backoff with jitter lives in ``reach.core.backoff``; the rolling window in ``reach.core.stats``.

Nothing here sleeps or reads a clock: callers pass ``now``. Field lessons behind the defaults:
a fixed 2 s timeout broke when inference went from 1 s to 3 s at peak; a global breaker would
have cut healthy agents along with a failing one; three agents failed together and every task
retried at once.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from reach.core.stats import Window


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class Breaker:
    """Per-agent circuit breaker over the last ``window`` calls.

    closed → open when at least ``min_calls`` of the window and ≥ ``threshold`` of them failed;
    open for ``open_for`` seconds; then half-open admits one probe; its success closes.
    """

    window: int = 10
    min_calls: int = 5
    threshold: float = 0.5
    open_for: float = 5.0
    state: BreakerState = BreakerState.CLOSED
    opened_at: float = 0.0
    probing: bool = False
    # A half-open probe failed: the agent rests the whole ``open_for`` before the next one
    # (no early probe; a struggling agent is not kept busy by probes).
    rested: bool = False
    outcomes: deque[bool] = field(default_factory=deque)
    # What tripped it, kept while it is open: a failed probe clears the window, and an
    # operator must still see why the agent is held (and since when: ``opened_at``).
    tripped_rate: float = 0.0
    tripped_calls: int = 0

    def allows(self, now: float) -> bool:
        """May a call be routed to this agent now? (Does not reserve the half-open probe.)"""
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            return now - self.opened_at >= self.open_for
        return not self.probing

    def early_probe(self, now: float) -> bool:
        """May this open breaker be probed before its wait is over, as the last resort of a
        capability whose agents are all open? Once per open period, never after a failed
        probe."""
        return self.state is BreakerState.OPEN and not self.rested

    def on_dispatch(self, now: float) -> None:
        """A call is being sent: to an open breaker, it is the half-open probe. Routing sends
        one only past the wait, or early as the last resort when every agent of the capability
        is open (``Router.pick``, ``early_probe``)."""
        if self.state is BreakerState.OPEN:
            self.state = BreakerState.HALF_OPEN
        if self.state is BreakerState.HALF_OPEN:
            self.probing = True

    def record(self, ok: bool, now: float) -> BreakerState:
        """Feed one outcome; returns the state after it."""
        if self.state is BreakerState.HALF_OPEN:
            self.probing = False
            self.outcomes.clear()
            if ok:
                self.state, self.rested = BreakerState.CLOSED, False
            else:
                self.state, self.opened_at, self.rested = BreakerState.OPEN, now, True
            return self.state
        outcomes = self.outcomes
        outcomes.append(ok)
        while len(outcomes) > self.window:
            outcomes.popleft()
        n = len(outcomes)
        # A success cannot raise the fault rate, so it can trip a closed breaker only as the
        # call that brings the window to ``min_calls`` (below that nothing trips): the rate
        # is worked out on faults and at that one count, not on every success.
        if (not ok or n == self.min_calls) and n >= self.min_calls \
                and self.state is BreakerState.CLOSED:
            rate = self.fault_rate()
            if rate >= self.threshold:
                self.state, self.opened_at = BreakerState.OPEN, now
                self.tripped_rate, self.tripped_calls = rate, n
        return self.state

    def reset(self) -> None:
        """Closed, with an empty window (an operator's reset, or a new version)."""
        self.state = BreakerState.CLOSED
        self.outcomes.clear()
        self.probing = self.rested = False

    def fault_rate(self) -> float:
        if not self.outcomes:
            return 0.0
        return sum(1 for ok in self.outcomes if not ok) / len(self.outcomes)


class LatencyWindow(Window):
    """The last ``size`` successful latencies (seconds) of one capability; its P95 sets the
    completion timeout."""

    __slots__ = ()

    def __init__(self, size: int = 50) -> None:
        super().__init__(size)

    def p95(self) -> float | None:
        return self.quantile(0.95)


@dataclass(frozen=True, slots=True)
class TimeoutRule:
    """How long an attempt of a capability that declared no ``latency_ms`` may run.

    Until such a capability has ``samples`` successes on record its completion timeout is
    ``default``: guessing a latency it never declared killed ordinary work (a 1.5 s handler
    got 1.2 s, ran, and was dead-lettered anyway). With that much history its own P95 × 1.5
    rules, never below ``floor`` (a run of fast successes must not make the next ordinary
    call a timeout)."""

    default: float = 30.0
    floor: float = 1.0
    samples: int = 20


DEFAULT_RULE = TimeoutRule()


def completion_timeout(latency_ms: float | None, window: LatencyWindow, override: float | None,
                       rule: TimeoutRule = DEFAULT_RULE) -> float:
    """One attempt's completion timeout; a caller's ``override`` (its time left) wins.

    - declared: max(latency × 1.2, P95 of recent successes × 1.5);
    - not declared (None), fewer than ``rule.samples`` successes: ``rule.default``;
    - not declared, with that history: max(P95 × 1.5, ``rule.floor``)."""
    if override is not None:
        return override
    # (The window's own quantile and its deque's length: this runs on every attempt.)
    if latency_ms is None:
        if len(window.samples) < rule.samples:
            return rule.default
        p95 = window.quantile(0.95)
        return rule.default if p95 is None else max(p95 * 1.5, rule.floor)
    declared = latency_ms / 1000.0 * 1.2
    p95 = window.quantile(0.95)
    return declared if p95 is None else max(declared, p95 * 1.5)


@dataclass(slots=True)
class RetryBudget:
    """Coordinator-wide cap on retries: at most ``ratio`` of first attempts, plus ``minimum``,
    over the last ``window`` seconds (counted in one-second buckets).

    Field lesson: three agents failed together and every task retried at once; retries must
    not multiply load exactly when the system is weakest. A retry the budget refuses ends the
    task as a dead letter (replayable once the cause is fixed) instead of adding to the storm.
    """

    ratio: float = 0.2
    minimum: int = 10
    window: float = 10.0
    buckets: deque[list[float]] = field(default_factory=deque)  # [second, firsts, retries]
    firsts: float = 0.0
    retries: float = 0.0

    def _bucket(self, now: float) -> list[float]:
        second = float(int(now))
        buckets = self.buckets
        while buckets and buckets[0][0] <= second - self.window:
            _, f, r = buckets.popleft()
            self.firsts -= f
            self.retries -= r
        if not buckets or buckets[-1][0] != second:
            buckets.append([second, 0.0, 0.0])
        return buckets[-1]

    def first(self, now: float) -> None:
        """A task made its first attempt."""
        self._bucket(now)[1] += 1
        self.firsts += 1

    def allowance(self, now: float) -> float:
        self._bucket(now)
        return self.minimum + self.ratio * self.firsts - self.retries

    def spend(self, now: float) -> bool:
        """Take one retry from the budget; False (nothing taken) when it is spent."""
        bucket = self._bucket(now)
        if self.minimum + self.ratio * self.firsts - self.retries < 1:
            return False
        bucket[2] += 1
        self.retries += 1
        return True


@dataclass(slots=True)
class Pacer:
    """Client-side back-pressure: after a ``rejected`` with level L (0..1), wait before the
    next submit; the wait grows while rejections continue and halves with each acceptance."""

    max_delay: float = 1.0
    delay: float = 0.0
    until: float = 0.0

    def rejected(self, level: float, now: float) -> None:
        level = min(1.0, max(0.0, level))
        self.delay = min(self.max_delay, max(self.delay * 2, 0.02) * (0.5 + level))
        self.until = now + self.delay

    def accepted(self) -> None:
        self.delay /= 2
        if self.delay < 0.001:
            self.delay = 0.0

    def wait(self, now: float) -> float:
        """Seconds to hold the next submit (0 when not slowed down)."""
        return max(0.0, self.until - now)
