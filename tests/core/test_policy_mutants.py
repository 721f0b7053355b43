"""reach.core.policy, pinned where mutation testing found it loose (issue 17): every verdict
in full (outcome, healthy for the breaker, judged, error), and the hop cap."""

from __future__ import annotations

import pytest

from reach.core import policy
from reach.core.policy import FailOver, Finish, Retry, Tries, Verdict
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
    ("lost", None, False, False, Verdict(OC.UNDELIVERED, False, True, "not acknowledged")),
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
