"""Delivery policy (pure): what an attempt's end means, and what a task does next.

The gateway's driver asks, awaits, applies; every rule of DESIGN.md's "Agent faults vs
answers" and "retries" rows is decided here, from plain values, so each is a unit test:

- a delivery never acknowledged fails over to another candidate at once, but work that is
  not idempotent only on proof that it never arrived: a link that went away after the invoke
  left sends it back to that agent alone (its key cache knows it), never to a second one;
- a fault, lost connection or completion timeout after the ack is retried only for idempotent
  capabilities, with backoff, within the task's ``max_retries`` and a hop cap;
- a ``TaskError`` answer is final and not the agent's fault;
- a completion timeout caused by the caller's own short deadline is not the agent's fault;
- an agent held by another node whose holder had no free slot for it ("full": its slots are
  shared with the holder's own callers) is neither a fault nor a hop: the task fails over or
  waits for a slot, as for an agent saturated here;
- "no healthy agent" waits for a breaker about to let work through rather than spend a retry.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reach.core.backoff import Backoff
from reach.core.resilience import Breaker
from reach.core.tasks import Outcome, TaskState

#: Hops (tries of an agent, fail-overs included) a task may make beyond ``max_retries + 1``:
#: fail-overs are free of the retry count, but not without end.
EXTRA_HOPS = 16
#: While a resumed task waits for the agent that was running it, it looks again this often.
RECOVERY_POLL = 0.5
#: A task waiting for an agent looks again this often at the latest (a change of the agents
#: wakes it at once; this catches what no change announces).
AGENT_POLL = 5.0


# ---------------------------------------------------------------- one attempt's end


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one attempt's end means."""

    outcome: Outcome
    healthy: bool          # for the agent's breaker and the capability's health: not a fault
    judged: bool           # False: neither success nor fault (the caller's deadline cut it)
    error: str | None      # the attempt's error text
    full: bool = False     # refused for want of a free slot (at the agent's holder node)
    # No ack came, but no proof of non-delivery either: the link went away after the invoke
    # left, so the agent may have started it (the SDK acknowledges a write before it starts)
    uncertain: bool = False

    @property
    def finished(self) -> bool:
        return self.outcome in (Outcome.OK, Outcome.ANSWER)

    @property
    def name(self) -> str:
        """The outcome as a plain string (for metrics keys)."""
        return _NAMES[self.outcome]


_NAMES = {o: o.value for o in Outcome}  # Enum.value is a descriptor: slow on a hot path
_OK = Verdict(Outcome.OK, True, True, None)
_ANSWER = Verdict(Outcome.ANSWER, True, True, None)
_UNDELIVERED = Verdict(Outcome.UNDELIVERED, False, True, "not acknowledged")
_LOST_UNACKED = Verdict(Outcome.UNDELIVERED, False, True,
                        "connection lost before the agent acknowledged", uncertain=True)
_LOST = Verdict(Outcome.LOST, False, True, "connection lost")
_TIMEOUT = Verdict(Outcome.TIMEOUT, False, True, "completion timeout")
_CALLER_DEADLINE = Verdict(Outcome.TIMEOUT, False, False, "the caller's deadline passed")
# Nothing ran and nothing is wrong with the agent: not judged, so no breaker or health moves.
_FULL = Verdict(Outcome.UNDELIVERED, True, False, "no free slot at the agent's node", True)


def classify(kind: str, payload: Any, *, acked: bool, caller_bound: bool) -> Verdict:
    """Judge how an attempt ended. ``kind`` is what the link reported (ok | error | lost |
    timeout | undelivered | unsent | full; ``unsent``: the work never left, it had no link or
    the link refused it); ``caller_bound``: the caller's deadline was shorter than the
    capability's own completion timeout."""
    if kind == "ok":
        return _OK
    if kind == "error":
        error = payload if isinstance(payload, dict) else {}
        if error.get("code") == "unavailable":  # refused before it ran (shutting down)
            return _UNDELIVERED
        if (error.get("details") or {}).get("answer"):
            return _ANSWER
        return Verdict(Outcome.FAULT, False, True, str(error.get("message")))
    if kind == "lost":
        return _LOST if acked else _LOST_UNACKED
    if kind == "unsent":
        return _UNDELIVERED
    if kind == "timeout":
        return _CALLER_DEADLINE if caller_bound else _TIMEOUT
    if kind == "undelivered":  # an adapter says why in its own words (connection refused…)
        return Verdict(Outcome.UNDELIVERED, False, True, payload) \
            if isinstance(payload, str) and payload else _UNDELIVERED
    if kind == "full":
        return _FULL
    return Verdict(Outcome.FAULT, False, True, kind)


def mostly_healthy(recent: Sequence[bool]) -> bool:
    """Did most of a capability's recent attempts, at any agent, work?"""
    return len(recent) > 0 and sum(recent) * 2 >= len(recent)


def smoothed(previous: float | None, took: float) -> float:
    """An agent's observed latency: an exponential average of its successes."""
    return took if previous is None else 0.8 * previous + 0.2 * took


# ---------------------------------------------------------------- what the task does next


@dataclass(frozen=True, slots=True)
class Retry:
    """Back off, then try again. ``charge``: the retry re-sends work, so it spends the
    coordinator-wide retry budget; ``anywhere``: agents already tried may be chosen again."""

    charge: bool
    anywhere: bool


@dataclass(frozen=True, slots=True)
class FailOver:
    """Try another candidate at once (nothing ran: no backoff, no retry spent). ``free``:
    not a hop either (the agent was full: the driver looks for a slot again, and waits for
    one like any saturated agent's)."""

    free: bool = False


@dataclass(frozen=True, slots=True)
class GoBack:
    """Send the task again to the agent that may have it, and to no other: its key cache
    answers a second invoke of the same key with the first run's outcome. For work that is
    not idempotent and whose agent's link went away before it acknowledged."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait up to ``seconds`` for the agents to change, then look again."""

    seconds: float
    for_breaker: bool = False  # spent from the task's breaker-wait allowance


@dataclass(frozen=True, slots=True)
class Finish:
    """The task ends in ``state``; ``retryable`` says whether the capability was."""

    state: TaskState
    retryable: bool = False


Step = Retry | FailOver | GoBack | Wait | Finish
_GO_BACK = GoBack()
_SUCCEEDED = Finish(TaskState.SUCCEEDED)
_ANSWERED = Finish(TaskState.FAILED)
_FREE_FAILOVER = FailOver(free=True)


@dataclass(slots=True)
class Tries:
    """A task's count of tries so far, as the driver keeps it."""

    max_retries: int
    retries: int = 0
    hops: int = 0

    @property
    def max_hops(self) -> int:
        return self.max_retries + 1 + EXTRA_HOPS

    def may_retry(self) -> bool:
        return self.retries < self.max_retries and self.hops < self.max_hops

    def may_hop(self) -> bool:
        return self.hops < self.max_hops


def resumed_tries(max_retries: int, history: Iterable[tuple[str, float, str]]) -> Tries:
    """The tries a resumed task had spent when the coordinator stopped, from its stored
    history since it was last accepted or replayed (a "pending" entry not noted "resumed"):
    its retries are its "retrying" moves (each one ``Tries.retries`` step of the driver's),
    its hops its "dispatched" moves. A restart must not hand a task a fresh retry count: a
    task with ``max_retries`` 2 made 4 attempts across one."""
    retries = hops = 0
    for state, _, note in reversed(list(history)):
        if state == TaskState.PENDING.value and note != "resumed":
            break
        if state == TaskState.RETRYING.value:
            retries += 1
        elif state == TaskState.DISPATCHED.value:
            hops += 1
    return Tries(max_retries, retries, hops)


def kept_timeout(timeouts: Iterable[float | None]) -> float | None:
    """The completion timeout a resumed task keeps: its last attempt's that recorded one
    (``timeouts`` oldest first), or None (none did: the coordinator works one out). A
    restarted coordinator has lost the latency history behind the one it had (an attempt
    given 3 s before a restart got 0.36 s after it, from the declared latency alone)."""
    kept = None
    for timeout in timeouts:
        if timeout is not None:
            kept = timeout
    return kept


def time_left(created_at: float, timeout: float, now: float) -> float:
    """What is left of a caller's ``timeout`` at wall time ``now`` for a task submitted at
    ``created_at``: a resumed task's deadline runs from its submit, not from the restart."""
    return created_at + timeout - now


def after_attempt(verdict: Verdict, tries: Tries, *, idempotent: bool,
                  others_left: bool) -> Step:
    """The next step once an attempt ended. ``others_left``: a healthy candidate not yet
    tried remains; ``idempotent``: the capability may run twice."""
    if verdict.full:
        return _FREE_FAILOVER
    if verdict.outcome is Outcome.OK:
        return _SUCCEEDED
    if verdict.outcome is Outcome.ANSWER:
        return _ANSWERED
    if verdict.outcome is Outcome.UNDELIVERED:
        if verdict.uncertain and not idempotent:  # at most once: it may be running there
            return _GO_BACK
        # Never acknowledged: fail over while another candidate is left; once every one was
        # tried, it costs a retry like any other failure.
        if others_left and tries.may_hop():
            return FailOver()
        if tries.retries < tries.max_retries:
            return Retry(charge=True, anywhere=True)
    if idempotent and tries.may_retry():
        return Retry(charge=True, anywhere=False)
    return Finish(TaskState.DEAD, retryable=idempotent)


def when_unavailable(tries: Tries, *, recovering_for: float, breaker_wait: float | None,
                     breaker_allowance: float, deadline_left: float | None) -> Step:
    """The next step when no agent can take the task now. ``recovering_for``: seconds left
    of the recovery grace after a restart (agents are reconnecting); ``breaker_wait``: how
    long until a breaker lets work through (``breaker_wait`` below); ``breaker_allowance``:
    what is left of the task's budget for such waits."""
    if recovering_for > 0:
        return Wait(min(RECOVERY_POLL, recovering_for))
    if breaker_wait is not None and breaker_allowance > 0:
        limit = min(breaker_wait, breaker_allowance)
        if deadline_left is not None:
            limit = min(limit, deadline_left)
        return Wait(max(0.0, limit), for_breaker=True)
    if tries.may_retry():
        # Nothing was sent: waiting for an agent adds no load, so it does not spend the
        # coordinator-wide retry budget.
        return Retry(charge=False, anywhere=True)
    return Finish(TaskState.DEAD)


def breaker_wait(blocked: Iterable[Breaker], now: float, *, capability_healthy: bool,
                 probe_wait: float) -> float | None:
    """When only breakers keep a capability's agents from work (``blocked``: the reachable
    agents' breakers that refuse work now): how long to wait for one to let work through.

    - a half-open probe is out: up to ``probe_wait`` (its verdict wakes the waiters);
    - every breaker is resting but most of the capability's recent attempts worked (they
      tripped on noise): until the first one turns half-open;
    - otherwise (the capability is failing as a whole, or nothing is blocked): None."""
    blocked = list(blocked)
    if not blocked:
        return None
    if any(b.probing for b in blocked):
        return probe_wait
    if not capability_healthy:
        return None
    return max(0.0, min(b.opened_at + b.open_for - now for b in blocked))


def retry_delay(backoff: Backoff, retry: int, rng: random.Random,
                deadline_left: float | None) -> float:
    """Seconds before retry number ``retry`` (1 for the first), never past the deadline."""
    delay = backoff.delay(retry - 1, rng)
    if deadline_left is not None:
        delay = min(delay, max(0.0, deadline_left))
    return delay


def pressure(level: float, capacity: int, waiting: int) -> float:
    """Back-pressure level 0.5..1 of a rejection: how saturated the agents said they were,
    and how many wait per slot that could free."""
    return min(level, 0.5 + 0.5 * waiting / max(1, capacity))


def hedges(*, idempotent: bool, declared: bool, requested: bool | None) -> bool:
    """Whether a read still running gets a second copy (at the capability's P95): only an
    idempotent capability that hedges, as declared unless the caller said otherwise."""
    return idempotent and (declared if requested is None else requested)


def caller_bound(left: float | None, own_timeout: float) -> bool:
    """Whether the caller's time ``left`` is shorter than the capability's own completion
    timeout: a timeout then is the caller's doing, not the agent's fault."""
    return left is not None and left < own_timeout
