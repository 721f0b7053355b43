"""reach.core.policy, pinned where mutation testing found it loose (issue 17): every verdict
in full (outcome, healthy for the breaker, judged, error), and the hop cap."""

from __future__ import annotations

import random

import pytest

from reach.core import policy
from reach.core.backoff import Backoff
from reach.core.policy import FailOver, Finish, Retry, Tries, Verdict, Wait
from reach.core.resilience import Breaker
from reach.core.tasks import Outcome, TaskState

OC = Outcome


@pytest.mark.parametrize(("kind", "payload", "acked", "bound", "expected"), [
    ("ok", None, True, False, Verdict(OC.OK, True, True, None)),
    ("error", {"message": "no", "details": {"answer": True}}, True, False,
     Verdict(OC.ANSWER, True, True, None)),
    ("error", {"code": "unavailable"}, True, False,
     Verdict(OC.UNDELIVERED, False, True, "not acknowledged")),
    ("error", {"message": "boom"}, True, False, Verdict(OC.FAULT, False, True, "boom")),
    ("lost", None, True, False, Verdict(OC.LOST, False, True, "connection lost")),
    ("lost", None, False, False, Verdict(OC.UNDELIVERED, False, True,
                                         "connection lost before the agent acknowledged",
                                         uncertain=True)),
    ("unsent", None, False, False, Verdict(OC.UNDELIVERED, False, True, "not acknowledged")),
    ("timeout", None, True, False, Verdict(OC.TIMEOUT, False, True, "completion timeout")),
    ("timeout", None, True, True,
     Verdict(OC.TIMEOUT, False, False, "the caller's deadline passed")),
    ("undelivered", None, False, False,
     Verdict(OC.UNDELIVERED, False, True, "not acknowledged")),
    ("weird", None, True, False, Verdict(OC.FAULT, False, True, "weird")),
])
def test_every_verdict_in_full(kind, payload, acked, bound, expected):
    got = policy.classify(kind, payload, acked=acked, caller_bound=bound)
    assert got == expected
    assert got.name == expected.outcome.value
    assert got.finished is (expected.outcome in (OC.OK, OC.ANSWER))


def test_a_task_may_hop_max_retries_plus_one_plus_sixteen_times():
    assert policy.EXTRA_HOPS == 16
    assert Tries(2).max_hops == 19
    assert Tries(2, hops=18).may_hop() and not Tries(2, hops=19).may_hop()
    assert Tries(2, retries=1, hops=18).may_retry()
    assert not Tries(2, retries=1, hops=19).may_retry()
    assert not Tries(2, retries=2, hops=0).may_retry()
    undelivered = policy.classify("undelivered", None, acked=False, caller_bound=False)
    assert policy.after_attempt(undelivered, Tries(2, hops=18), idempotent=False,
                                others_left=True) == FailOver()
    assert policy.after_attempt(undelivered, Tries(2, retries=2, hops=19), idempotent=False,
                                others_left=True) == Finish(TaskState.DEAD)
    assert policy.after_attempt(undelivered, Tries(2, retries=1, hops=19), idempotent=False,
                                others_left=True) == Retry(charge=True, anywhere=True)


def test_a_fresh_task_may_hop_seventeen_times_with_no_retries():
    tries = Tries(0)
    for _ in range(17):
        assert tries.may_hop()
        tries.hops += 1
    assert not tries.may_hop() and not tries.may_retry()


def test_health_needs_at_least_one_attempt_and_half_of_them_working():
    assert policy.mostly_healthy([True])
    assert not policy.mostly_healthy([False])
    assert policy.mostly_healthy([True, False])


def test_smoothed_latency_is_four_fifths_old_one_fifth_new():
    assert policy.smoothed(1.0, 2.0) == pytest.approx(1.2)
    assert policy.smoothed(2.0, 1.0) == pytest.approx(1.8)


def test_waits_and_finishes_say_exactly_what_they_are():
    tries = Tries(1, retries=1)
    recovering = policy.when_unavailable(tries, recovering_for=0.2, breaker_wait=None,
                                         breaker_allowance=0.0, deadline_left=None)
    assert recovering == Wait(0.2, for_breaker=False)
    done = policy.when_unavailable(tries, recovering_for=0.0, breaker_wait=None,
                                   breaker_allowance=0.0, deadline_left=None)
    assert done == Finish(TaskState.DEAD, retryable=False)


def test_a_breaker_wait_uses_what_is_left_of_the_allowance_even_below_a_second():
    tries = Tries(1)
    step = policy.when_unavailable(tries, recovering_for=0.0, breaker_wait=2.0,
                                   breaker_allowance=0.5, deadline_left=None)
    assert step == Wait(0.5, for_breaker=True)
    step = policy.when_unavailable(tries, recovering_for=0.0, breaker_wait=0.25,
                                   breaker_allowance=3.0, deadline_left=None)
    assert step == Wait(0.25, for_breaker=True)
    step = policy.when_unavailable(tries, recovering_for=0.0, breaker_wait=2.0,
                                   breaker_allowance=3.0, deadline_left=-1.0)
    assert step == Wait(0.0, for_breaker=True)  # the deadline passed: no wait, never negative
    spent = policy.when_unavailable(tries, recovering_for=0.0, breaker_wait=2.0,
                                    breaker_allowance=0.0, deadline_left=None)
    assert spent == Retry(charge=False, anywhere=True)


def test_breaker_wait_takes_any_iterable_of_breakers():
    resting = Breaker(open_for=5.0)
    for _ in range(5):
        resting.record(False, 10.0)
    blocked = (b for b in [resting])  # a generator: read once
    assert policy.breaker_wait(blocked, 11.0, capability_healthy=True,
                               probe_wait=9.0) == pytest.approx(4.0)


def test_retry_number_one_waits_the_first_backoff_delay():
    flat = Backoff(base=0.5, factor=2.0, jitter=0.0)
    rng = random.Random(0)
    assert policy.retry_delay(flat, 1, rng, None) == 0.5
    assert policy.retry_delay(flat, 2, rng, None) == 1.0
    assert policy.retry_delay(flat, 3, rng, 0.25) == 0.25


def test_pressure_grows_with_waiters_per_slot():
    assert policy.pressure(1.0, capacity=4, waiting=2) == 0.75
    assert policy.pressure(1.0, capacity=1, waiting=1) == 1.0
    assert policy.pressure(0.9, capacity=0, waiting=1) == 0.9  # no slots counts as one
    assert policy.pressure(1.0, capacity=0, waiting=0) == 0.5


def test_a_caller_deadline_equal_to_the_timeout_is_not_the_callers_doing():
    assert not policy.caller_bound(1.2, 1.2)
    assert policy.caller_bound(1.19, 1.2)
