"""What a resumed task keeps (reach.core.policy, issue 25 item 14): the tries it spent since it
was last accepted or replayed, the completion timeout of its last attempt that recorded one,
and a deadline that runs from its submit."""

from __future__ import annotations

from reach.core import policy


def test_resumed_tries_counts_retries_and_dispatches_since_the_run_began() -> None:
    history = [
        ("pending", 1.0, "accepted"), ("dispatched", 1.1, "attempt 1 to a"),
        ("retrying", 1.2, "retry 1"), ("dispatched", 1.3, "attempt 2 to a"),
        ("running", 1.4, "acknowledged"), ("dead", 1.5, "timeout"),
        ("pending", 2.0, "replayed"),  # a replay starts a run with a fresh count
        ("dispatched", 2.1, "attempt 3 to a"), ("retrying", 2.2, "retry 1"),
        ("dispatched", 2.3, "attempt 4 to b"), ("pending", 3.0, "resumed"),
        ("retrying", 3.1, "retry 2: the coordinator restarted"),
        ("queued", 3.2, "waiting"), ("pending", 4.0, "resumed"),
    ]
    tries = policy.resumed_tries(3, history)
    assert (tries.max_retries, tries.retries, tries.hops) == (3, 2, 2)
    assert tries.may_retry()
    assert not policy.resumed_tries(2, history).may_retry()


def test_resumed_tries_of_a_task_never_tried_and_of_no_history() -> None:
    fresh = policy.resumed_tries(2, [("pending", 1.0, "accepted"), ("pending", 2.0, "resumed")])
    assert (fresh.retries, fresh.hops) == (0, 0)
    alone = policy.resumed_tries(1, [("retrying", 1.0, ""), ("dispatched", 1.0, "")])
    assert (alone.retries, alone.hops) == (1, 1)


def test_kept_timeout_is_the_last_recorded_one() -> None:
    assert policy.kept_timeout([]) is None
    assert policy.kept_timeout([None, None]) is None  # rows from before it was recorded
    assert policy.kept_timeout([3.0, None]) == 3.0
    assert policy.kept_timeout([3.0, 0.5, None]) == 0.5


def test_time_left_runs_from_the_submit() -> None:
    assert policy.time_left(100.0, 5.0, 102.0) == 3.0
    assert policy.time_left(100.0, 5.0, 107.5) == -2.5  # already past: the task ends at once
