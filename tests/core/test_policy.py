"""reach.core.policy: each delivery rule as plain values in, a decision out."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.core import policy
from reach.core.backoff import Backoff
from reach.core.policy import FailOver, Finish, Retry, Tries, Wait
from reach.core.resilience import Breaker, BreakerState
from reach.core.tasks import Outcome, TaskState

S = TaskState


def verdict(kind: str, payload: object = None, acked: bool = True,
            caller_bound: bool = False) -> policy.Verdict:
    return policy.classify(kind, payload, acked=acked, caller_bound=caller_bound)


def test_classify_every_way_an_attempt_ends() -> None:
    assert verdict("ok", 1) == policy.Verdict(Outcome.OK, True, True, None)
    answer = verdict("error", {"code": "task_failed", "message": "no", "details": {"answer": True}})
    assert answer.outcome is Outcome.ANSWER and answer.healthy and answer.finished
    fault = verdict("error", {"code": "task_failed", "message": "boom", "details": {}})
    assert (fault.outcome, fault.healthy, fault.error) == (Outcome.FAULT, False, "boom")
    refused = verdict("error", {"code": "unavailable", "message": "draining"})
    assert refused.outcome is Outcome.UNDELIVERED and not refused.healthy
    assert verdict("lost", acked=False).outcome is Outcome.UNDELIVERED
    assert verdict("lost", acked=True).outcome is Outcome.LOST
    timeout = verdict("timeout")
    assert (timeout.outcome, timeout.judged, timeout.healthy) == (Outcome.TIMEOUT, True, False)
    cut = verdict("timeout", caller_bound=True)
    assert (cut.outcome, cut.judged) == (Outcome.TIMEOUT, False)
    assert cut.error == "the caller's deadline passed"
    assert verdict("undelivered").error == "not acknowledged"
    assert verdict("error", "not a dict").outcome is Outcome.FAULT


def test_success_and_answers_finish() -> None:
    tries = Tries(2, hops=1)
    assert policy.after_attempt(verdict("ok"), tries, idempotent=False,
                                others_left=True) == Finish(S.SUCCEEDED)
    answer = verdict("error", {"details": {"answer": True}})
    assert policy.after_attempt(answer, tries, idempotent=True,
                                others_left=True) == Finish(S.FAILED)


def test_undelivered_fails_over_while_candidates_remain_then_costs_a_retry() -> None:
    v = verdict("unsent")  # proof: never handed to the agent
    assert policy.after_attempt(v, Tries(2, hops=1), idempotent=False,
                                others_left=True) == FailOver()
    assert policy.after_attempt(v, Tries(2, hops=1), idempotent=False,
                                others_left=False) == Retry(charge=True, anywhere=True)
    spent = Tries(2, retries=2, hops=3)
    assert policy.after_attempt(v, spent, idempotent=True,
                                others_left=False) == Finish(S.DEAD, retryable=True)
    capped = Tries(2, hops=Tries(2).max_hops)  # the hop cap stops endless fail-overs
    assert policy.after_attempt(v, capped, idempotent=False,
                                others_left=True) == Retry(charge=True, anywhere=True)


def test_a_link_lost_before_the_ack_goes_back_for_work_that_is_not_idempotent() -> None:
    """No proof it did not arrive: at most once sends it back to that agent alone; an
    idempotent capability fails over as for any undelivered attempt."""
    v = verdict("lost", acked=False)
    assert (v.outcome, v.uncertain) == (Outcome.UNDELIVERED, True)
    for tries in (Tries(2, hops=1), Tries(0, hops=Tries(0).max_hops)):
        assert policy.after_attempt(v, tries, idempotent=False,
                                    others_left=True) == policy.GoBack()
    assert policy.after_attempt(v, Tries(2, hops=1), idempotent=True,
                                others_left=True) == FailOver()
    for proof in (verdict("unsent"), verdict("undelivered", "connection refused"),
                  verdict("error", {"code": "unavailable"})):
        assert not proof.uncertain
        assert policy.after_attempt(proof, Tries(2, hops=1), idempotent=False,
                                    others_left=True) == FailOver()


@pytest.mark.parametrize("kind", ["timeout", "lost"])
def test_faults_after_the_ack_retry_only_when_idempotent(kind: str) -> None:
    v = verdict(kind) if kind != "lost" else verdict("lost", acked=True)
    assert policy.after_attempt(v, Tries(2, hops=1), idempotent=True,
                                others_left=True) == Retry(charge=True, anywhere=False)
    assert policy.after_attempt(v, Tries(2, hops=1), idempotent=False,
                                others_left=True) == Finish(S.DEAD, retryable=False)
    assert policy.after_attempt(v, Tries(2, retries=2, hops=3), idempotent=True,
                                others_left=True) == Finish(S.DEAD, retryable=True)


def test_when_unavailable_prefers_recovery_then_breakers_then_a_free_retry() -> None:
    tries = Tries(1, hops=1)
    assert policy.when_unavailable(tries, recovering_for=2.0, breaker_wait=1.0,
                                   breaker_allowance=5.0, deadline_left=None) == Wait(0.5)
    assert policy.when_unavailable(tries, recovering_for=0.2, breaker_wait=None,
                                   breaker_allowance=5.0, deadline_left=None) == Wait(0.2)
    assert policy.when_unavailable(
        tries, recovering_for=0, breaker_wait=3.0, breaker_allowance=5.0,
        deadline_left=1.5) == Wait(1.5, for_breaker=True)
    assert policy.when_unavailable(
        tries, recovering_for=0, breaker_wait=3.0, breaker_allowance=0.0,
        deadline_left=None) == Retry(charge=False, anywhere=True)
    assert policy.when_unavailable(
        Tries(1, retries=1, hops=2), recovering_for=0, breaker_wait=None,
        breaker_allowance=5.0, deadline_left=None) == Finish(S.DEAD)


def test_breaker_wait() -> None:
    resting = Breaker(open_for=5.0, state=BreakerState.OPEN, opened_at=10.0)
    probing = Breaker(open_for=5.0, state=BreakerState.HALF_OPEN, probing=True)
    assert policy.breaker_wait([], 11.0, capability_healthy=True, probe_wait=5.0) is None
    assert policy.breaker_wait([resting, probing], 11.0, capability_healthy=False,
                               probe_wait=5.0) == 5.0
    assert policy.breaker_wait([resting], 11.0, capability_healthy=False,
                               probe_wait=5.0) is None
    assert policy.breaker_wait([resting], 11.0, capability_healthy=True,
                               probe_wait=5.0) == 4.0
    assert policy.breaker_wait([resting], 99.0, capability_healthy=True,
                               probe_wait=5.0) == 0.0


@given(st.integers(1, 40), st.floats(0, 100) | st.none())
def test_retry_delay_never_passes_the_deadline(retry: int, left: float | None) -> None:
    delay = policy.retry_delay(Backoff(), retry, random.Random(retry), left)
    assert 0 <= delay <= Backoff().cap
    if left is not None:
        assert delay <= left


def test_pressure_hedge_and_caller_bound() -> None:
    assert policy.pressure(1.0, capacity=4, waiting=0) == 0.5
    assert policy.pressure(1.0, capacity=4, waiting=4) == 1.0
    assert policy.pressure(0.7, capacity=0, waiting=9) == 0.7
    assert policy.hedges(idempotent=True, declared=True, requested=None) is True
    assert policy.hedges(idempotent=True, declared=False, requested=True) is True
    assert policy.hedges(idempotent=True, declared=True, requested=False) is False
    assert policy.hedges(idempotent=False, declared=True, requested=True) is False
    assert policy.hedges(idempotent=True, declared=False, requested=None) is False
    assert policy.caller_bound(0.5, 1.2) and not policy.caller_bound(2.0, 1.2)
    assert not policy.caller_bound(None, 1.2)


def test_health_and_smoothing() -> None:
    assert not policy.mostly_healthy([])
    assert policy.mostly_healthy([True, False]) and not policy.mostly_healthy([False, False, True])
    assert policy.smoothed(None, 0.3) == 0.3
    assert policy.smoothed(1.0, 0.0) == pytest.approx(0.8)
