"""A finished task as spans (reach/core/spans.py), with plain calls: where the task span sits
in the trace, one span per attempt, and the fail-over, hedge, replay and retry moments."""

from __future__ import annotations

from reach.core.spans import TEXT_MAX, task_spans
from reach.core.tasks import Attempt, Envelope, TaskState, new_task
from reach.core.traces import child_traceparent, span_id_of

S = TaskState
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TASK = "ab" * 16
CALLER = f"00-{TRACE}-00f067aa0ba902b7-01"


def envelope(**kw: object) -> Envelope:
    base: dict[str, object] = dict(task_id=TASK, trace_id=TRACE, capability="stock.query",
                                   params={"sku": "secret"}, caller="planner",
                                   idempotency_key="k", created_at=10.0)
    base.update(kw)
    env = Envelope(**base)  # type: ignore[arg-type]
    if env.traceparent is None and "traceparent" not in kw:
        env.traceparent = child_traceparent(env.trace_id, env.task_id, CALLER)
        env.parent_span = span_id_of(CALLER)
    return env


def attempt(n: int, agent: str, start: float, end: float | None, outcome: str,
            error: str | None = None) -> Attempt:
    return Attempt(number=n, agent_id=f"id-{agent}", agent=agent, started_at=start,
                   ended_at=end, outcome=outcome, error=error)


def test_a_simple_call_sits_under_the_caller_with_the_id_agents_were_given() -> None:
    task = new_task(envelope(), 10.0)
    task.attempts.append(attempt(1, "inv", 10.1, 10.3, "ok"))
    task.move(S.DISPATCHED, 10.1, "attempt 1 to inv")
    task.move(S.RUNNING, 10.15, "acknowledged")
    task.move(S.SUCCEEDED, 10.3)
    spans = task_spans(task)
    assert (spans.trace_id, spans.parent_span_id, spans.span_id) == (
        TRACE, "00f067aa0ba902b7", TASK[:16])
    assert spans.sampled
    assert (spans.task.start, spans.task.end, spans.task.error) == (10.0, 10.3, None)
    assert spans.task.attributes["reach.agent"] == "inv"
    assert not {"reach.replayed", "reach.parent_task_id", "reach.error.code"} & set(
        spans.task.attributes)
    assert "secret" not in repr(spans)  # params are never put on a span
    [one] = spans.attempts
    assert (one.start, one.end, one.error) == (10.1, 10.3, None)
    assert not {"reach.instance", "reach.error"} & set(one.attributes)
    assert spans.task.events == ()


def test_an_immediate_fail_over_and_a_hedge_are_events() -> None:
    task = new_task(envelope(), 10.0)
    task.attempts += [attempt(1, "a", 10.1, 10.2, "undelivered", "never acknowledged"),
                      attempt(2, "b", 10.2, 10.5, "ok"),
                      attempt(3, "c", 10.4, 10.5, "cancelled", "hedge lost")]
    task.move(S.DISPATCHED, 10.1)
    task.move(S.DISPATCHED, 10.2)  # a's attempt had ended: a fail-over
    task.move(S.RUNNING, 10.25)
    task.move(S.DISPATCHED, 10.4)  # b still running: a hedge
    task.move(S.SUCCEEDED, 10.5)
    spans = task_spans(task)
    failover, hedge = spans.task.events
    assert failover.name == "failover" and failover.at == 10.2
    assert failover.attributes == {"reach.attempt": 2, "reach.agent": "b",
                                   "reach.from_agent": "a",
                                   "reach.reason": "undelivered: never acknowledged"}
    assert hedge.name == "hedge" and hedge.attributes["reach.agent"] == "c"
    assert spans.task.attributes["reach.agent"] == "b"  # the one that answered, not the last
    assert [a.error for a in spans.attempts] == [
        "undelivered: never acknowledged", None, None]  # a lost hedge is no error


def test_a_retry_is_an_event_with_its_reason_and_a_dead_task_an_error() -> None:
    task = new_task(envelope(), 10.0)
    task.attempts += [attempt(1, "a", 10.1, 10.2, "fault", "boom " * 100)]
    task.move(S.DISPATCHED, 10.1)
    task.move(S.RETRYING, 10.2, "retry 1 in 5 ms: fault: boom")
    task.move(S.RETRYING, 10.25, "retry 2 in 5 ms: no agent")  # none could be sent
    task.move(S.DEAD, 10.3)
    task.error = {"code": "unavailable", "message": "no agent"}
    spans = task_spans(task)
    retry, again = spans.task.events
    assert (retry.name, retry.at, retry.attributes["reach.attempt"]) == ("retry", 10.2, 1)
    assert again.attributes["reach.attempt"] == 1  # still after attempt 1
    assert spans.task.error == "unavailable: no agent"
    assert spans.task.attributes["reach.error.code"] == "unavailable"
    error = spans.attempts[0].error or ""
    assert len(error) == TEXT_MAX == 200 and error.endswith("…")
    assert spans.attempts[0].attributes["reach.error"] == ("boom " * 40)[:199] + "…"


def test_a_replay_is_a_new_span_of_its_own_life() -> None:
    task = new_task(envelope(), 10.0)
    task.attempts.append(attempt(1, "a", 10.1, 10.2, "fault", "down"))
    task.move(S.DISPATCHED, 10.1)
    task.move(S.DEAD, 10.2)
    task.move(S.PENDING, 50.0, "replayed (was fault: down)")
    task.attempts.append(attempt(2, "a", 50.0, 50.2, "fault", "still down"))
    task.move(S.DISPATCHED, 50.0)
    task.move(S.RUNNING, 50.1)
    task.move(S.RETRYING, 50.2, "retry 1 in 5 ms: fault: still down")
    task.attempts.append(attempt(3, "a", 50.3, 50.4, "ok"))
    task.move(S.DISPATCHED, 50.3)
    task.move(S.SUCCEEDED, 50.4)
    spans = task_spans(task)
    assert spans.span_id is None  # the first life's span already has the task's id
    assert (spans.task.start, spans.task.end) == (50.0, 50.4)
    assert [a.attributes["reach.attempt"] for a in spans.attempts] == [2, 3]
    assert spans.task.attributes["reach.replayed"] is True
    assert spans.task.attributes["reach.attempts"] == 2
    replayed, retry = spans.task.events
    assert replayed.name == "replayed" and "was fault" in str(replayed.attributes)
    assert replayed.at == 50.0
    assert (retry.name, retry.attributes["reach.attempt"]) == ("retry", 2)


def test_an_unfinished_attempt_ends_with_the_task() -> None:
    task = new_task(envelope(), 10.0)
    task.attempts.append(attempt(1, "a", 10.1, None, "running"))
    task.move(S.DISPATCHED, 10.1)
    task.move(S.FAILED, 10.4)
    [one] = task_spans(task).attempts
    assert one.end == 10.4 and one.error is None


def test_where_the_span_sits_without_a_w3c_caller() -> None:
    own = task_spans(new_task(envelope(trace_id="my-trace", traceparent=None), 1.0))
    assert own.trace_id is None and own.parent_span_id is None
    assert own.task.attributes["reach.trace_id"] == "my-trace"
    child = task_spans(new_task(envelope(parent_task_id="cd" * 16, traceparent=None), 1.0))
    assert child.parent_span_id == "cd" * 8  # the parent task's span
    assert child.task.attributes["reach.parent_task_id"] == "cd" * 16
    for flags, sampled in (("00", False), ("01", True), ("10", False), ("11", True)):
        env = envelope(traceparent=f"00-{TRACE}-{TASK[:16]}-{flags}")
        assert task_spans(new_task(env, 1.0)).sampled is sampled  # only the sampled bit counts


def test_span_id_of_reads_the_callers_span() -> None:
    assert span_id_of(CALLER) == "00f067aa0ba902b7"
    assert span_id_of(f"00-{TRACE}-{'0' * 16}-01") is None
    assert span_id_of("not a traceparent") is None and span_id_of(None) is None


def test_queued_and_fallback_moments_and_the_agent_instance() -> None:
    task = new_task(envelope(), 10.0)
    task.move(S.RETRYING, 10.01, "retry 1 in 5 ms: no agent for stock.query")
    task.move(S.QUEUED, 10.05, "waiting for a free slot")
    one = attempt(1, "a", 10.1, 10.2, "timeout", "no result in 0.1 s")
    one.instance = "a-pod-3"
    task.attempts.append(one)
    task.move(S.DISPATCHED, 10.1)
    task.fallback = {"kind": "last_good", "reason": "timeout"}
    task.move(S.SUCCEEDED, 10.3, "fallback: last_good (timeout)")
    spans = task_spans(task)
    retry, queued, fallback = spans.task.events
    assert retry.attributes["reach.attempt"] == 0  # before any attempt
    assert (queued.name, queued.at, queued.attributes) == (
        "queued", 10.05, {"reach.reason": "waiting for a free slot"})
    assert fallback.name == "fallback" and fallback.attributes == {
        "reach.reason": "timeout", "reach.fallback": "last_good"}
    assert spans.task.attributes["reach.fallback"] == "last_good"
    assert spans.attempts[0].attributes["reach.instance"] == "a-pod-3"


def test_a_short_error_is_kept_whole_and_a_first_life_keeps_every_attempt() -> None:
    task = new_task(envelope(), 10.0)
    # stamped by another node whose clock is behind: still this task's attempt
    task.attempts.append(attempt(1, "a", 9.9, 10.2, "fault", "x" * 200))
    task.move(S.DISPATCHED, 10.1)
    task.move(S.FAILED, 10.2)
    [one] = task_spans(task).attempts
    assert one.attributes["reach.error"] == "x" * 200
