"""reach.core.traces, pinned where mutation testing found it loose (issue 17).

The W3C header as callers really send it (upper case, padded), the child header for ids that
are not W3C-shaped, the depth of a task whose parent is outside the trace or in a cycle, the
summary's root, worst state, failure origin and duration, and every field of every hop of a
fail-over, a failure, an unacknowledged answer and a task still running: the admin feed and
the dashboard show these fields as they are (docs/admin-feed.md, "TraceSummary", "Timeline").
"""

from __future__ import annotations

from typing import Any

from reach.core.tasks import Attempt, Envelope, Task, TaskState, new_task
from reach.core.traces import child_traceparent, hops, summary, timeline, trace_id_of

S = TaskState
TID = "4bf92f3577b34da6a3ce929d0e0e4736"
TASK = "0123456789abcdef0123456789abcdef"


def task(task_id: str, parent: str | None = None, capability: str = "x.get",
         created: float = 0.0, caller: str = "planner") -> Task:
    env = Envelope(task_id=task_id, trace_id="tr", capability=capability, params={},
                   caller=caller, idempotency_key=task_id, created_at=created,
                   parent_task_id=parent)
    return new_task(env, created)


def succeed(t: Task, at: float) -> None:
    """Answered as soon as sent (a task cannot succeed before it is dispatched)."""
    t.move(S.DISPATCHED, at, "attempt")
    t.move(S.SUCCEEDED, at)


def hop(phase: str, start: float, end: float | None, *, agent: str | None = None,
        attempt: int | None = None, failed: bool = False, note: str = "",
        task_id: str = "t", capability: str = "x.get", depth: int = 0) -> dict[str, Any]:
    duration = None if end is None else round((end - start) * 1000, 3)
    return {"task_id": task_id, "capability": capability, "depth": depth, "phase": phase,
            "start": start, "end": end, "duration_ms": duration, "agent": agent,
            "attempt": attempt, "failed": failed, "note": note}


# ------------------------------------------------------------------ W3C traceparent


def test_a_traceparent_is_read_whatever_its_case_and_padding() -> None:
    """Proxies upper-case and pad headers; the trace is the same trace."""
    assert trace_id_of(f"  00-{TID.upper()}-00F067AA0BA902B7-01 \n") == TID
    assert trace_id_of(f"00-{TID}-00f067aa0ba902b7-01") == TID
    assert trace_id_of(f"01-{TID}-00f067aa0ba902b7-00") == TID  # a later version: still read
    assert trace_id_of(f"00-{TID}-00f067aa0ba902b7-0") is None
    assert trace_id_of(f"00-{TID}0-00f067aa0ba902b7-01") is None
    assert trace_id_of(f"ff-{TID}-00f067aa0ba902b7-01") is None  # version ff is invalid
    assert trace_id_of(f"00-{'0' * 32}-00f067aa0ba902b7-01") is None  # so is a zero trace


def test_the_child_header_keeps_the_callers_flags_read_like_the_header() -> None:
    """The sampling flags of an upper-case, padded caller header are kept; without a valid
    caller header the child is sampled (01)."""
    given = f" 00-{TID.upper()}-00F067AA0BA902B7-00 "
    assert child_traceparent(TID, TASK, given) == f"00-{TID}-{TASK[:16]}-00"
    assert child_traceparent(TID, TASK, "garbage") == f"00-{TID}-{TASK[:16]}-01"


def test_ids_that_are_not_w3c_shaped_give_the_callers_header_back() -> None:
    """A caller-chosen trace id or a task id that is not 32 hex digits cannot make a W3C
    header: the agent gets what the caller sent, unchanged (or nothing)."""
    assert child_traceparent(TID, "task-1", "as-sent") == "as-sent"
    assert child_traceparent("my-trace", TASK, "as-sent") == "as-sent"
    assert child_traceparent("my-trace", "task-1", None) is None


# ------------------------------------------------------------------ summary


def test_depth_stops_at_a_parent_outside_the_trace_and_at_a_cycle() -> None:
    """A child of a task of another trace is a root here; a corrupt parent cycle ends."""
    a = task("a", parent="elsewhere", created=1.0)
    b = task("b", parent="a", created=2.0)
    c = task("c", parent="b", created=3.0)
    line = timeline("tr", [c, b, a])
    assert [(t["task_id"], t["depth"]) for t in line["tasks"]] == [("a", 0), ("b", 1), ("c", 2)]
    x, y = task("x", parent="y", created=1.0), task("y", parent="x", created=2.0)
    assert [t["depth"] for t in timeline("tr", [x, y])["tasks"]] == [1, 1]
    # A task below a loop it is not part of: every ancestor is counted once, and it ends.
    d = task("d", parent="x", created=3.0)
    assert [t["depth"] for t in timeline("tr", [x, y, d])["tasks"]] == [1, 1, 2]


def test_the_root_is_the_shallowest_then_the_earliest() -> None:
    """The root is the task nothing in the trace called: the shallowest, and among equals
    the first created (not the first listed)."""
    late_root = task("r", capability="r.plan", created=5.0, caller="boss")
    child = task("c", parent="r", capability="c.get", created=6.0)
    early_child = task("e", parent="r", capability="e.get", created=0.5)
    head = summary("tr", [child, early_child, late_root])
    assert (head["root"], head["caller"], head["tasks"]) == ("r.plan", "boss", 3)
    assert head["started_at"] == 0.5
    other = task("o", capability="o.plan", created=4.0, caller="other")
    assert summary("tr", [late_root, other])["root"] == "o.plan"


def test_the_state_is_the_worst_one_and_a_running_task_leaves_no_end() -> None:
    """dead > failed > running > succeeded: an operator looks at the worst."""
    ok, running, failed, dead = task("a"), task("b"), task("c"), task("d")
    succeed(ok, 1.0)
    failed.move(S.FAILED, 2.0, "boom")
    dead.move(S.DEAD, 3.0, "attempts exhausted")
    assert summary("tr", [ok])["state"] == "succeeded"
    assert summary("tr", [ok, running])["state"] == "running"
    assert summary("tr", [ok, running])["ended_at"] is None
    assert summary("tr", [running, failed, ok])["state"] == "failed"
    assert summary("tr", [failed, dead, running])["state"] == "dead"
    assert summary("tr", [dead, ok])["failed_capability"] == "x.get"


def test_the_origin_of_a_failure_is_the_deepest_then_the_latest_failed_task() -> None:
    """Failures at the same depth: the one that failed last is named; a succeeded deeper
    task is not a failure at all."""
    root = task("r", capability="r.plan")
    one = task("1", parent="r", capability="one.get")
    two = task("2", parent="r", capability="two.get")
    deeper_ok = task("3", parent="1", capability="three.get")
    succeed(deeper_ok, 1.0)
    two.move(S.FAILED, 2.0, "boom")
    one.move(S.DEAD, 3.0, "attempts exhausted")
    root.move(S.FAILED, 4.0, "because of one")
    head = summary("tr", [root, two, one, deeper_ok])
    assert head["failed_capability"] == "one.get"
    assert head["state"] == "dead"
    assert summary("tr", [deeper_ok])["failed_capability"] is None


def test_the_duration_runs_from_the_first_created_to_the_last_ended() -> None:
    a = task("a", created=1.0)
    b = task("b", parent="a", created=1.25)
    succeed(b, 3.5)
    succeed(a, 2.0)
    head = summary("tr", [a, b])
    assert (head["started_at"], head["ended_at"], head["duration_ms"]) == (1.0, 3.5, 2500.0)
    line = timeline("tr", [b, a])
    assert (line["started_at"], line["duration_ms"]) == (1.0, 2500.0)
    assert [(t["task_id"], t["started_at"], t["ended_at"], t["state"], t["parent_task_id"],
             t["caller"], t["error"]) for t in line["tasks"]] == [
        ("a", 1.0, 2.0, "succeeded", None, "planner", None),
        ("b", 1.25, 3.5, "succeeded", "a", "planner", None)]


# ------------------------------------------------------------------ hops


def test_a_fail_over_then_a_failure_shows_every_field_of_every_hop() -> None:
    """Dispatched twice without a retry is an immediate fail-over (the first delivery
    failed); a TaskError answer fails processing and the done hop carries its reason."""
    t = task("t", created=1.0)
    t.attempts += [Attempt(1, "id-one", "one", 1.5), Attempt(2, "id-two", "two", 2.0)]
    t.move(S.DISPATCHED, 1.5, "attempt 1 to one")
    t.move(S.DISPATCHED, 2.0, "attempt 2 to two")
    t.move(S.RUNNING, 2.25, "acknowledged")
    t.move(S.FAILED, 3.0, "boom")
    assert hops(t, depth=2) == [
        hop("queued", 1.0, 1.5, depth=2),
        hop("delivered", 1.5, 2.0, agent="one", attempt=1, failed=True, depth=2),
        hop("delivered", 2.0, 2.25, agent="two", attempt=2, depth=2),
        hop("processing", 2.25, 3.0, agent="two", attempt=2, failed=True, note="boom",
            depth=2),
        hop("done", 3.0, 3.0, agent="two", attempt=2, failed=True, note="failed: boom",
            depth=2)]


def test_a_retry_after_processing_then_an_unacknowledged_success() -> None:
    """The retry hop carries the failure's note on the hop it ends; an answer without an
    ack closes the delivery as processing; a success's note is on its done hop only."""
    t = task("t", created=0.0)
    t.attempts += [Attempt(1, "id-one", "one", 0.5), Attempt(2, "id-two", "two", 2.0)]
    t.move(S.QUEUED, 0.25, "waiting for a free slot")
    t.move(S.DISPATCHED, 0.5, "attempt 1 to one")
    t.move(S.RUNNING, 0.75, "acknowledged")
    t.move(S.RETRYING, 1.0, "retry 1: boom")
    t.move(S.DISPATCHED, 2.0, "attempt 2 to two")
    t.move(S.SUCCEEDED, 2.5, "fine")
    assert hops(t) == [
        hop("queued", 0.0, 0.5),
        hop("delivered", 0.5, 0.75, agent="one", attempt=1),
        hop("processing", 0.75, 1.0, agent="one", attempt=1, failed=True, note="retry 1: boom"),
        hop("retry", 1.0, 2.0),
        hop("processing", 2.0, 2.5, agent="two", attempt=2),
        hop("done", 2.5, 2.5, agent="two", attempt=2, note="succeeded: fine")]


def test_a_retry_while_queued_is_not_a_failed_delivery() -> None:
    """No agent was available: the wait ends in a retry, and no delivery failed."""
    t = task("t", created=0.0)
    t.move(S.RETRYING, 1.0, "no agent")
    t.move(S.DEAD, 2.0, "attempts exhausted")
    assert hops(t) == [
        hop("queued", 0.0, 1.0, note="no agent"),
        hop("retry", 1.0, 2.0, failed=True, note="attempts exhausted"),
        hop("done", 2.0, 2.0, failed=True, note="dead: attempts exhausted")]


def test_a_dispatch_without_its_attempt_record_and_a_running_task() -> None:
    """An attempt record can lag its transition (it is written after): the hop has no agent
    but the attempt number; a task still running ends in an open hop."""
    t = task("t", created=0.0)
    t.move(S.DISPATCHED, 1.0, "attempt 1")
    assert hops(t) == [hop("queued", 0.0, 1.0), hop("delivered", 1.0, None, attempt=1)]
    t.attempts.append(Attempt(1, "id-one", "one", 1.0))
    t.move(S.RUNNING, 1.5, "acknowledged")
    assert hops(t)[-1] == hop("processing", 1.5, None, agent="one", attempt=1)


def test_a_replayed_dead_letter_starts_a_new_wait() -> None:
    """dead → pending (a replay): the earlier run's hops stay, a new wait begins."""
    t = task("t", created=0.0)
    t.move(S.DEAD, 1.0, "attempts exhausted")
    t.move(S.PENDING, 5.0, "replayed")
    assert hops(t) == [
        hop("queued", 0.0, 1.0, failed=True, note="attempts exhausted"),
        hop("done", 1.0, 1.0, failed=True, note="dead: attempts exhausted"),
        hop("queued", 5.0, None)]


def test_the_timeline_orders_every_hop_by_its_start() -> None:
    """Hops of a parent and its child interleave in time order, each with its depth."""
    a = task("a", capability="a.plan", created=0.0)
    b = task("b", parent="a", capability="b.get", created=0.5)
    a.attempts.append(Attempt(1, "id-one", "one", 0.25))
    a.move(S.DISPATCHED, 0.25, "attempt 1")
    succeed(b, 0.75)
    a.move(S.SUCCEEDED, 1.0)
    got = [(h["task_id"], h["phase"], h["start"], h["depth"])
           for h in timeline("tr", [b, a])["hops"]]
    assert got == [("a", "queued", 0.0, 0), ("a", "processing", 0.25, 0),
                   ("b", "queued", 0.5, 1), ("b", "processing", 0.75, 1),
                   ("b", "done", 0.75, 1), ("a", "done", 1.0, 0)]


def test_durations_are_milliseconds_rounded_to_the_microsecond() -> None:
    """The feed shows milliseconds with three decimals: no float noise, no lost precision."""
    t = task("t", created=0.0)
    t.move(S.DISPATCHED, 0.0001234, "attempt 1")
    t.move(S.SUCCEEDED, 0.0012345678)
    assert [h["duration_ms"] for h in hops(t)] == [0.123, 1.111, 0.0]
    assert summary("tr", [t])["duration_ms"] == 1.235
