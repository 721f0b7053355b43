"""Active probes: when an agent is due one, and what its answers say (pure; time is an argument).

Heartbeats prove a process lives, not that it works: a leaked connection pool once made every
request of an agent hang (100 ms → 20 s) while its heartbeats went on (FIELD.md). A probe is a
cheap call the agent answers from its serving path (the same handler slots and thread pool as
real work), so a wedged agent answers it late or not at all.

The rule, per agent:

- a probe is due every ``interval`` (default 30 s, per agent), and at once after a slow call
  (``slow_call``) or a slow probe;
- a probe answered later than ``slow`` (default 5 s), answered not ``ok``, or not answered
  within ``slow`` is *slow*; ``suspect_after`` (2) slow probes in a row make the agent
  ``held``: suspected, no new work, whatever its heartbeats say;
- one fast ``ok`` probe clears the streak and lifts the hold;
- a held agent whose check answered slow or failed is probed again after a backoff:
  ``interval``/16 after the answer that suspected it, doubling per slow answer, never longer
  than ``interval``. Without it an agent that fails its check at once (a dead HTTP service
  refuses the connection in microseconds) was probed again at once, forever: thousands of
  probes and log lines a second (issue 25, item 12).

Each answer in time also says whether the agent's *failure* changed (``Verdict.news``): a
first failed check, a failure in other words than the last (``ProbeState.failing``), or the
first fast pass after failures. The coordinator logs those, not every failed probe: one log line
per change, however long an agent stays down.

At most ``max_outstanding`` (2) probes are unanswered at an agent at once: a wedged agent is
not sent a queue of probes it cannot answer. A late answer to a probe already judged slow
changes nothing but frees its place and makes the next probe due at once (the agent may be
back). ``ProbeBook`` keeps every agent's ``ProbeState`` and a heap of the times something is
due, so ``due`` costs the agents due, not all of them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Literal

Change = Literal["suspect", "restore"]


@dataclass(frozen=True, slots=True)
class ProbePolicy:
    """Field defaults: probe every ~30 s; slower than 5 s twice → remove (FIELD.md)."""

    interval: float = 30.0
    slow: float = 5.0
    suspect_after: int = 2
    max_outstanding: int = 2

    def __post_init__(self) -> None:
        if self.interval <= 0 or self.slow <= 0:
            raise ValueError("probe interval and probe_slow must be positive")
        if self.suspect_after < 1 or self.max_outstanding < 1:
            raise ValueError("suspect_after and max_outstanding must be at least 1")


def bounded(asked: float | None, default: float, low: float, high: float) -> float:
    """The interval an agent gets when it asks for ``asked`` (None: ``default``): at least
    ``default × low``, at most ``default × high``."""
    if asked is None:
        return default
    return min(max(asked, default * low), default * high)


def slow_call(took: float, latency_ms: float | None, timed_out: bool, factor: float) -> bool:
    """Whether a call says the agent may be wedged: it timed out, or took more than
    ``factor`` times its capability's declared latency (undeclared: only a timeout tells)."""
    return timed_out or (latency_ms is not None and took * 1000.0 > latency_ms * factor)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one probe said: ``slow`` (late, failed or unanswered), its time in ms (None when
    unanswered), and the agent's change, if any (``suspect``: now held; ``restore``: free)."""

    slow: bool
    ms: float | None
    change: Change | None = None
    late: bool = False  # the answer to a probe already judged slow: nothing is judged again
    news: bool = False  # the agent's failure changed (began, changed words, or ended)


@dataclass(slots=True)
class ProbeState:
    """One agent's probes: when the next is due, which are unanswered, the slow streak."""

    interval: float
    next_at: float
    outstanding: dict[int, float] = field(default_factory=dict)  # probe id → sent at
    judged: set[int] = field(default_factory=set)  # outstanding ids already counted slow
    streak: int = 0
    held: bool = False
    last_ms: float | None = None
    last_at: float | None = None
    last_ok: bool | None = None
    sent: int = 0
    slow_probes: int = 0
    failing: str | None = None  # the last failed check's words, until a check passes
    armed: float | None = None  # the heap entry that stands for this state

    def view(self, now: float) -> dict[str, object]:
        """The ``probe`` object of an agent view (docs/admin-feed.md)."""
        return {"interval_s": self.interval, "last_ms": self.last_ms,
                "last_ok": self.last_ok,
                "ago_s": None if self.last_at is None else round(max(0.0, now - self.last_at), 3),
                "slow_streak": self.streak, "sent": self.sent, "slow": self.slow_probes,
                "unanswered": len(self.outstanding)}


class ProbeBook:
    """Every probed agent's ``ProbeState`` by key, and when each next needs a look."""

    def __init__(self, policy: ProbePolicy) -> None:
        self.policy = policy
        self.states: dict[Hashable, ProbeState] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0

    # ------------------------------------------------------------ membership

    def track(self, key: Hashable, now: float, interval: float | None = None) -> ProbeState:
        """Start probing ``key`` (again, from a clean slate): the first probe is due after one
        interval."""
        every = self.policy.interval if interval is None else interval
        state = self.states[key] = ProbeState(interval=every, next_at=now + every)
        self._arm(key, state)
        return state

    def forget(self, key: Hashable) -> None:
        self.states.pop(key, None)  # (its heap entries are skipped when they come up)

    # ------------------------------------------------------------ the schedule

    def next_at(self) -> float | None:
        """When ``due`` next has something to do (None: nothing is tracked)."""
        heap = self._heap
        while heap:
            at, _, key = heap[0]
            state = self.states.get(key)
            if state is not None and state.armed == at:
                return at
            heapq.heappop(heap)
        return None

    def due(self, now: float, busy: Callable[[Hashable], bool] = lambda _k: False
            ) -> tuple[list[Hashable], list[tuple[Hashable, Verdict]]]:
        """The keys to send a probe to now, and the verdicts of probes unanswered past
        ``slow``. A ``busy`` agent (every slot taken by work sent to it) is not sent one
        until ``slow`` later: it would measure the coordinator's own queue at it."""
        send: list[Hashable] = []
        verdicts: list[tuple[Hashable, Verdict]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            state = self.states.get(key)
            if state is None or state.armed != at:
                continue
            state.armed = None
            for probe_id, sent_at in state.outstanding.items():
                if probe_id not in state.judged and sent_at + self.policy.slow <= now:
                    state.judged.add(probe_id)
                    verdicts.append((key, self._judge(state, now, None, slow=True, ok=False)))
            if state.next_at <= now and len(state.outstanding) < self.policy.max_outstanding:
                if busy(key):
                    state.next_at = now + min(state.interval, self.policy.slow)
                else:
                    send.append(key)
                    state.next_at = now + state.interval
            self._arm(key, state)
        return send, verdicts

    def sent(self, key: Hashable, probe_id: int, now: float) -> None:
        """A probe with ``probe_id`` left for ``key`` at ``now``."""
        state = self.states.get(key)
        if state is None:
            return
        state.outstanding[probe_id] = now
        state.sent += 1
        self._arm(key, state)

    def slow_call(self, key: Hashable, now: float) -> None:
        """A call at ``key`` was slow (``slow_call``): probe it now, not at the next interval."""
        state = self.states.get(key)
        if state is not None and state.next_at > now:
            state.next_at = now
            self._arm(key, state)

    def answered(self, key: Hashable, probe_id: int, now: float, ok: bool = True,
                 detail: str = "") -> Verdict | None:
        """An answer to probe ``probe_id`` at ``now`` (``detail``: a failed check's words);
        None when no such probe is unanswered at ``key`` (never sent, answered already, or
        the agent is not tracked)."""
        state = self.states.get(key)
        if state is None or probe_id not in state.outstanding:
            return None
        ms = (now - state.outstanding.pop(probe_id)) * 1000.0
        if probe_id in state.judged:
            state.judged.discard(probe_id)
            state.next_at = min(state.next_at, now)  # a place freed; the agent may be back
            self._arm(key, state)
            return Verdict(slow=True, ms=ms, late=True)
        slow = not ok or ms > self.policy.slow * 1000.0
        # (an answer that is ok but slow neither fails in words nor passes: no news)
        news = _news(state, True, "") if not slow else \
            _news(state, False, detail or "failed") if not ok else False
        verdict = self._judge(state, now, ms, slow=slow, ok=ok)
        state.next_at = now + self.retry_after(state) if slow else now + state.interval
        self._arm(key, state)
        return verdict if not news else Verdict(verdict.slow, verdict.ms, verdict.change,
                                                news=True)

    def retry_after(self, state: ProbeState) -> float:
        """How long after an answer that was slow or failed the next probe is due: at once
        while the streak is short of ``suspect_after`` (to confirm or clear the suspicion
        fast), then ``interval``/16 doubling per slow probe, at most ``interval``: a dead
        agent costs at most one probe per interval, not one per event-loop turn. (A probe
        judged unanswered, or answered after it was, is followed at once: it took ``slow``
        already, and at most ``max_outstanding`` wait at a time.)"""
        over = state.streak - self.policy.suspect_after
        if over < 0:
            return 0.0
        return state.interval * (1 << min(over, 4)) / 16

    # ------------------------------------------------------------ inside

    def _judge(self, state: ProbeState, now: float, ms: float | None, *, slow: bool,
               ok: bool) -> Verdict:
        ms = None if ms is None else round(ms, 3)
        state.last_at, state.last_ms, state.last_ok = now, ms, ok and not slow
        change: Change | None = None
        if slow:
            state.streak += 1
            state.slow_probes += 1
            state.next_at = min(state.next_at, now)
            if state.streak >= self.policy.suspect_after and not state.held:
                state.held, change = True, "suspect"
        else:
            state.streak = 0
            if state.held:
                state.held, change = False, "restore"
        return Verdict(slow=slow, ms=ms, change=change)

    def _arm(self, key: Hashable, state: ProbeState) -> None:
        """File ``state`` under the earliest time it needs a look: its next probe (while a
        place is free) or the ``slow`` limit of an unanswered probe not yet judged."""
        times = [sent_at + self.policy.slow for probe_id, sent_at in state.outstanding.items()
                 if probe_id not in state.judged]
        if len(state.outstanding) < self.policy.max_outstanding:
            times.append(state.next_at)
        at = min(times) if times else None
        if at == state.armed:
            return
        state.armed = at
        if at is not None:
            self._seq += 1
            heapq.heappush(self._heap, (at, self._seq, key))


def _news(state: ProbeState, passed: bool, words: str) -> bool:
    """Note an answer on ``state`` (``words``: why it did not pass); whether it is news: the
    first failure, a failure in other words than the last, or a pass after one."""
    if passed:
        news, state.failing = state.failing is not None, None
        return news
    news, state.failing = words != state.failing, words
    return news
