"""One attempt's deadlines as a pure machine (reach.core.flight), tested with plain calls:
when the ack and completion deadlines give an attempt up, a late ack, a stalled loop, and at
most once for work that is not idempotent (a late ack is waited for, never taken as proof
that the work did not arrive)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reach.core.flight import LAG_SLACK, TIMEOUT, UNDELIVERED, Flight


def fly(ack: float = 1.0, completion: float = 5.0, *, idempotent: bool = True,
        limit: float | None = None) -> Flight:
    return Flight.start(0.0, ack, completion, idempotent=idempotent, limit=limit)


def test_an_idempotent_attempt_never_acknowledged_is_undelivered_at_the_ack_deadline() -> None:
    f = fly()
    assert f.due == 1.0
    assert f.expire(1.0, 1.0) == UNDELIVERED


def test_a_non_idempotent_attempt_waits_past_a_late_ack_for_its_completion_deadline() -> None:
    f = fly(idempotent=False)
    assert f.due == 5.0  # the ack deadline is not a verdict for it
    assert f.expire(1.0, 1.0) == 5.0  # a timer armed before still only re-arms
    assert f.ack(4.0) == pytest.approx(9.0)  # acked late: its whole completion time from then
    assert f.expire(9.0, 9.0) == TIMEOUT


def test_a_non_idempotent_attempt_never_acknowledged_times_out_it_is_not_undelivered() -> None:
    f = fly(idempotent=False)
    assert f.expire(5.0, 5.0) == TIMEOUT


def test_completion_before_the_ack_deadline_is_a_timeout() -> None:
    f = fly(ack=1.0, completion=0.5)
    assert f.due == 0.5 and f.expire(0.5, 0.5) == TIMEOUT


def test_an_ack_within_the_slack_of_the_send_does_not_move_the_timer() -> None:
    f = fly()
    assert f.ack(LAG_SLACK / 2) is None and f.done_at == 5.0


def test_an_ack_at_once_does_not_move_the_timer() -> None:
    f = fly()
    assert f.ack(0.0) is None and f.done_at == 5.0
    assert f.expire(1.0, 1.0) == 5.0  # the ack deadline's timer, then the completion's
    assert f.expire(5.0, 5.0) == TIMEOUT


def test_a_second_ack_changes_nothing() -> None:
    f = fly()
    assert f.ack(0.9) == pytest.approx(5.9)
    assert f.ack(3.0) is None and f.done_at == pytest.approx(5.9)


def test_a_late_ack_never_moves_the_completion_past_the_caller_s_deadline() -> None:
    f = fly(ack=1.0, completion=2.0, limit=2.0)  # the caller gave 2 s
    assert f.ack(0.9) is None  # 0.9 + 2 would outlive the caller's own timeout
    assert f.done_at == 2.0 and f.expire(2.0, 2.0) == TIMEOUT


def test_a_late_ack_within_the_caller_s_deadline_gets_what_is_left_of_it() -> None:
    f = fly(ack=1.0, completion=2.0, limit=2.5)
    assert f.ack(0.9) == 2.5


def test_a_timer_that_fires_early_is_armed_again_for_the_same_instant() -> None:
    f = fly()
    assert f.expire(1.0, 0.9999) == 1.0
    assert f.expire(1.0, 1.0) == UNDELIVERED


def test_a_timer_late_by_a_stalled_loop_waits_once_more_as_long() -> None:
    f = fly()
    f.ack(0.0)
    assert f.expire(5.0, 5.5) == pytest.approx(6.0)  # the answer may sit unread
    assert f.expire(6.0, 6.5) == TIMEOUT  # late again: the grace was given once


def test_lateness_within_the_slack_is_on_time() -> None:
    f = fly()
    f.ack(0.0)
    assert f.expire(5.0, 5.0 + LAG_SLACK / 2) == TIMEOUT


def test_the_slack_is_five_milliseconds_and_an_ack_at_its_edge_is_on_time() -> None:
    """An ack 5 ms after the send (``LAG_SLACK``) leaves the completion deadline where it
    was; one 8 ms after restarts the completion clock from the ack, and a timer 8 ms late
    waits once more."""
    assert fly(completion=1.0).ack(0.005) is None
    late = fly(completion=1.0)
    assert late.ack(0.008) == pytest.approx(1.008) and late.done_at == pytest.approx(1.008)
    stalled = fly()
    stalled.ack(0.0)
    assert stalled.expire(5.0, 5.008) == pytest.approx(5.016)


class AnyOrder(RuleBasedStateMachine):
    """Acks, timers (early, on time, late) and time passing in any order: the attempt is
    never given up before its deadline, never as undelivered unless idempotent and never
    acknowledged, and a late ack never stretches it past the caller's deadline."""

    @initialize(ack=st.floats(0.01, 5), completion=st.floats(0.01, 30),
                idempotent=st.booleans(), bound=st.booleans())
    def start(self, ack: float, completion: float, idempotent: bool, bound: bool) -> None:
        self.now = 0.0
        self.limit = completion if bound else None  # a caller's deadline sets the completion
        self.f = Flight.start(0.0, ack, completion, idempotent=idempotent, limit=self.limit)
        self.armed = self.f.due
        self.first_done = self.f.done_at
        self.ended: str | None = None
        self.acked_at: float | None = None

    @rule(dt=st.floats(0, 3))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @precondition(lambda self: self.ended is None)
    @rule()
    def ack(self) -> None:
        if not self.f.acked:
            self.acked_at = self.now
        moved = self.f.ack(self.now)
        if moved is not None:
            assert moved >= self.now
            self.armed = moved

    @precondition(lambda self: self.ended is None and self.now >= self.armed - 0.001)
    @rule()
    def timer_fires(self) -> None:
        step = self.f.expire(self.armed, self.now)
        if isinstance(step, str):
            self.ended = step
            if step == UNDELIVERED:
                assert self.f.idempotent and not self.f.acked and self.now >= self.f.ack_at
            else:
                assert self.now >= self.f.done_at - 1e-9
        else:
            assert step >= self.now - 0.001  # never armed in the past
            self.armed = step

    @invariant()
    def never_past_the_caller_s_deadline(self) -> None:
        if self.limit is not None:
            assert self.f.done_at <= max(self.first_done, self.limit) + 1e-9

    @invariant()
    def an_ack_buys_its_whole_completion_time_or_the_caller_s_deadline(self) -> None:
        if self.acked_at is not None:
            wanted = self.acked_at + self.f.completion
            if self.limit is not None:
                wanted = min(wanted, self.limit)
            assert self.f.done_at >= wanted - LAG_SLACK - 1e-9


AnyOrder.TestCase.settings = settings(max_examples=300, stateful_step_count=30,
                                      deadline=None)
test_flight_in_any_order = AnyOrder.TestCase
