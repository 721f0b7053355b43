"""Traces at their edges: a trace with no tasks, a task that queues again after a retry
(waiting for a slot the second time), and a history entry this version does not know."""

from __future__ import annotations

from reach.core import traces
from reach.core.tasks import Attempt, Envelope, Task, TaskState, new_task

S = TaskState


def _task(history: list[tuple[str, float, str]], attempts: int = 0) -> Task:
    env = Envelope(task_id="t1", trace_id="tr", capability="x.work", params={}, caller="c",
                   idempotency_key="c/k", created_at=0.0)
    task = new_task(env, 0.0)
    task.history = history
    task.state = S(history[-1][0]) if history[-1][0] in set(S) else task.state
    for n in range(attempts):
        task.attempts.append(Attempt(n + 1, "id-a", "a", 0.0))
    return task


def test_a_trace_with_no_tasks_is_an_empty_running_summary() -> None:
    assert traces.summary("tr", []) == {
        "trace_id": "tr", "root": None, "caller": None, "tasks": 0, "started_at": None,
        "ended_at": None, "duration_ms": None, "state": "running", "failed_capability": None}
    assert traces.timeline("tr", [])["hops"] == []


def test_a_task_queued_again_after_a_retry_shows_the_backoff_then_a_second_wait() -> None:
    task = _task([("pending", 0.0, "accepted"), ("dispatched", 0.1, "attempt 1"),
                  ("running", 0.2, "acknowledged"), ("retrying", 0.5, "retry 1: boom"),
                  ("queued", 0.6, "waiting for a free slot"),
                  ("queued", 0.7, "still waiting"),  # a second note: the same wait
                  ("dispatched", 0.9, "attempt 2"), ("running", 1.0, "acknowledged"),
                  ("succeeded", 1.2, "")], attempts=2)
    phases = [(h["phase"], h["start"], h["end"], h["failed"]) for h in traces.hops(task)]
    assert phases == [("queued", 0.0, 0.1, False), ("delivered", 0.1, 0.2, False),
                      ("processing", 0.2, 0.5, True), ("retry", 0.5, 0.6, False),
                      ("queued", 0.6, 0.9, False), ("delivered", 0.9, 1.0, False),
                      ("processing", 1.0, 1.2, False), ("done", 1.2, 1.2, False)]


def test_a_history_state_this_version_does_not_know_is_skipped() -> None:
    task = _task([("pending", 0.0, "accepted"), ("dispatched", 0.1, "attempt 1"),
                  ("paused", 0.2, "a state from a newer coordinator"),
                  ("running", 0.3, "acknowledged"), ("succeeded", 0.4, "")], attempts=1)
    phases = [(h["phase"], h["start"], h["end"]) for h in traces.hops(task)]
    assert phases == [("queued", 0.0, 0.1), ("delivered", 0.1, 0.3),
                      ("processing", 0.3, 0.4), ("done", 0.4, 0.4)]
