"""Traces: one call chain's tasks as a summary and as a timeline of hops (pure).

Everything is derived from what each task already records (its timed transitions and its
attempts), so tracing costs nothing on the hot path. A hop is one phase of one task:

    queued      accepted → routed (includes waiting for a slot)
    delivered   routed → acknowledged by the agent
    processing  acknowledged (or routed, when the answer came without an ack) → attempt ended
    retry       attempt failed → next attempt routed (the backoff)
    done        the final state, a point in time

Shapes are those of docs/admin-feed.md ("TraceSummary", "Timeline").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from reach.core import chains
from reach.core.tasks import TERMINAL, Task, TaskState

S = TaskState
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_SEVERITY = {"succeeded": 0, "cancelled": 1, "running": 2, "failed": 3, "dead": 4}


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id inside a W3C ``traceparent`` header, or None if it is not a valid one."""
    m = _TRACEPARENT.match(traceparent.strip().lower()) if traceparent else None
    if m is None or m.group(1) == "ff" or set(m.group(2)) == {"0"}:
        return None
    return m.group(2)


def span_id_of(traceparent: str | None) -> str | None:
    """The parent span id inside a W3C ``traceparent`` (the caller's span), or None if the
    header is not a valid one or names no span (all zeros)."""
    if trace_id_of(traceparent) is None:
        return None
    span = (traceparent or "").strip().lower()[36:52]
    return None if span == "0" * 16 else span


def child_traceparent(trace_id: str, task_id: str, given: str | None) -> str | None:
    """The ``traceparent`` an agent receives for a task: the trace, with the task as the
    parent span (its id's first 16 hex digits), keeping the caller's sampling flags.
    None when the trace id is not W3C-shaped (a caller-chosen one) and none was given."""
    if not _HEX32.match(trace_id) or not _HEX32.match(task_id):
        return given
    m = _TRACEPARENT.match(given.strip().lower()) if given else None
    flags = m.group(4) if m is not None else "01"
    return f"00-{trace_id}-{task_id[:16]}-{flags}"


def _state(task: Task) -> str:
    return task.state.value if task.terminal else "running"


def _depths(tasks: Sequence[Task]) -> dict[str, int]:
    parents = {t.task_id: t.envelope.parent_task_id for t in tasks}
    depths: dict[str, int] = {}
    for tid in parents:
        depth, seen, cur = 0, {tid}, parents[tid]
        while cur is not None and cur in parents and cur not in seen:
            seen.add(cur)
            depth += 1
            cur = parents[cur]
        depths[tid] = depth
    return depths


def _ended_at(task: Task) -> float | None:
    if not task.terminal:
        return None
    # (a chain's note on where it went, maybe written after a restart, is not its end)
    return next((at for _, at, note in reversed(task.history) if not chains.noted(note)),
                None)


def summary(trace_id: str, tasks: Sequence[Task]) -> dict[str, Any]:
    """The one-line view of a trace: root, worst state, where it failed, how long it took."""
    if not tasks:
        return {"trace_id": trace_id, "root": None, "caller": None, "tasks": 0,
                "started_at": None, "ended_at": None, "duration_ms": None,
                "state": "running", "failed_capability": None}
    depths = _depths(tasks)
    root = min(tasks, key=lambda t: (depths[t.task_id], t.envelope.created_at))
    state = max((_state(t) for t in tasks), key=_SEVERITY.__getitem__)
    failed = [t for t in tasks if t.state in (S.FAILED, S.DEAD)]
    # The deepest failure is the origin: in A → B → C where C fails, B and A fail because of it.
    origin = max(failed, key=lambda t: (depths[t.task_id], t.updated_at), default=None)
    started = min(t.envelope.created_at for t in tasks)
    ends = [_ended_at(t) for t in tasks]
    ended = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    return {"trace_id": trace_id, "root": root.envelope.capability,
            "caller": root.envelope.caller, "tasks": len(tasks), "started_at": started,
            "ended_at": ended,
            "duration_ms": None if ended is None else round((ended - started) * 1000, 3),
            "state": state,
            "failed_capability": None if origin is None else origin.envelope.capability}


def hops(task: Task, depth: int = 0) -> list[dict[str, Any]]:
    """The phases of one task, in time order (see the module docstring)."""
    env = task.envelope
    out: list[dict[str, Any]] = []
    phase: str | None = None
    start = 0.0
    agent: str | None = None
    attempt: int | None = None
    dispatched = 0

    def close(end: float | None, failed: bool, note: str = "", as_phase: str | None = None
              ) -> None:
        if phase is None:
            return
        out.append({"task_id": env.task_id, "capability": env.capability, "depth": depth,
                    "phase": as_phase or phase, "start": start, "end": end,
                    "duration_ms": None if end is None else round((end - start) * 1000, 3),
                    "agent": agent, "attempt": attempt, "failed": failed, "note": note})

    for state, at, note in task.history:
        if state == S.PENDING:
            close(at, True)
            phase, start, agent, attempt = "queued", at, None, None
        elif state == S.QUEUED:
            if phase != "queued":
                close(at, False)
                phase, start, agent, attempt = "queued", at, None, None
        elif state == S.DISPATCHED:
            # Dispatched again without a retry in between is an immediate fail-over.
            close(at, phase in ("delivered", "processing"))
            dispatched += 1
            attempt = dispatched
            record = task.attempts[dispatched - 1] if dispatched <= len(task.attempts) else None
            agent = None if record is None else record.agent
            phase, start = "delivered", at
        elif state == S.RUNNING:
            close(at, False)
            phase, start = "processing", at
        elif state == S.RETRYING:
            close(at, phase in ("delivered", "processing"), note)
            phase, start, agent, attempt = "retry", at, None, None
        elif state in TERMINAL:
            if phase is None and chains.noted(note):
                continue  # where its chain went on: a note, not another end
            failed = state != S.SUCCEEDED
            close(at, failed, note if failed else "",
                  as_phase="processing" if phase == "delivered" and attempt else None)
            phase = None
            out.append({"task_id": env.task_id, "capability": env.capability, "depth": depth,
                        "phase": "done", "start": at, "end": at, "duration_ms": 0.0,
                        "agent": agent, "attempt": attempt, "failed": failed,
                        "note": f"{state}" + (f": {note}" if note else "")})
    close(None, False)  # still open: the task is running
    return out


def timeline(trace_id: str, tasks: Sequence[Task]) -> dict[str, Any]:
    """Every task of the trace and every hop, ordered by time."""
    depths = _depths(tasks)
    ordered = sorted(tasks, key=lambda t: t.envelope.created_at)
    all_hops = [h for t in ordered for h in hops(t, depths[t.task_id])]
    all_hops.sort(key=lambda h: h["start"])
    head = summary(trace_id, tasks)
    return {"trace_id": trace_id, "started_at": head["started_at"],
            "duration_ms": head["duration_ms"],
            "tasks": [{"task_id": t.task_id, "parent_task_id": t.envelope.parent_task_id,
                       "capability": t.envelope.capability, "caller": t.envelope.caller,
                       "state": _state(t), "depth": depths[t.task_id],
                       "started_at": t.envelope.created_at, "ended_at": _ended_at(t),
                       "error": t.error} for t in ordered],
            "hops": all_hops}
