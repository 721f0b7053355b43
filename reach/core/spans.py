"""A finished task as OpenTelemetry-shaped spans (pure): one span for the task, one per attempt.

Everything comes from what the task already records (its envelope, timed transitions and
attempts), so the spans carry the times things happened, not when they were built:

    task span     start: accepted (or replayed); end: the final state. Parent: the caller's
                  span (the traceparent it gave), or its parent task's; span id: the task id's
                  first 16 hex digits, the parent span agents are handed (core.traces), so an
                  agent's own spans hang under it. A replay's span gets a fresh id.
    attempt span  one per delivery to an agent, child of the task span: agent, number, outcome
    events        on the task span: queued, retry (with its reason), failover (the previous
                  attempt's outcome), hedge, replayed, fallback

Params, results and intent text are never put on a span. Error text (the status description,
an attempt's error, a retry's reason) is cut at ``TEXT_MAX`` characters. reach.server.otel
hands these records to the OpenTelemetry SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reach.core.tasks import Attempt, Outcome, Task, TaskState

S = TaskState
Value = str | int | float | bool
TEXT_MAX = 200
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-([0-9a-f]{2})$")
# Attempt outcomes shown as errors: the agent failed, or answered with a TaskError.
_FAILED = frozenset({Outcome.FAULT, Outcome.TIMEOUT, Outcome.LOST, Outcome.UNDELIVERED,
                     Outcome.ANSWER})


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    at: float  # wall-clock seconds
    attributes: dict[str, Value] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span: times in wall-clock seconds; ``error`` set means status ERROR."""

    name: str
    start: float
    end: float
    attributes: dict[str, Value]
    error: str | None = None
    events: tuple[SpanEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskSpans:
    """A task's spans and where they sit in the trace (ids as lower-case hex; ``trace_id``
    None when the task's trace id is not W3C-shaped: a fresh one is used then, and the
    task's own is kept in the ``reach.trace_id`` attribute)."""

    trace_id: str | None
    span_id: str | None  # None: a fresh one (a replay)
    parent_span_id: str | None
    sampled: bool
    task: SpanRecord
    attempts: tuple[SpanRecord, ...]


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_MAX else text[:TEXT_MAX - 1] + "…"


def _life(task: Task) -> int:
    """Index in the history where the task's last life began (a replay starts a new one)."""
    return max(i for i, entry in enumerate(task.history) if entry[0] == S.PENDING)


def task_spans(task: Task) -> TaskSpans:
    """The spans of ``task``, which has reached a final state (see the module docstring)."""
    env = task.envelope
    first = _life(task)
    begun = task.history[first][1] if first else env.created_at
    ended = task.updated_at  # when it reached its final state
    # (A first life keeps every attempt, also one another node's clock stamped earlier.)
    attempts = [a for a in task.attempts if a.started_at >= begun] if first else task.attempts
    trace_id = env.trace_id.lower() if _HEX32.match(env.trace_id.lower()) else None
    parent = env.parent_span
    if parent is None and env.parent_task_id and _HEX32.match(env.parent_task_id):
        parent = env.parent_task_id[:16]  # a parent task's span, as its agent was told
    # The caller's sampling decision travels in the traceparent's flags (kept for agents).
    m = _TRACEPARENT.match(env.traceparent or "")
    sampled = m is None or bool(int(m.group(1), 16) & 1)

    winner = next((a for a in attempts if a.outcome == Outcome.OK), None)
    last = winner or (attempts[-1] if attempts else None)
    attrs: dict[str, Value] = {
        "reach.task_id": env.task_id, "reach.trace_id": env.trace_id,
        "reach.capability": env.capability, "reach.caller": env.caller,
        "reach.state": task.state.value, "reach.attempts": len(attempts),
        "reach.priority": env.priority}
    if last is not None:
        attrs["reach.agent"] = last.agent
    if env.parent_task_id:
        attrs["reach.parent_task_id"] = env.parent_task_id
    if first:
        attrs["reach.replayed"] = True
    error = None
    if task.state is not S.SUCCEEDED:
        code = str((task.error or {}).get("code", task.state.value))
        attrs["reach.error.code"] = code
        message = str((task.error or {}).get("message", ""))
        error = _cut(f"{code}: {message}" if message else code)
    if task.fallback is not None:
        attrs["reach.fallback"] = str(task.fallback.get("kind", ""))
    record = SpanRecord(env.capability, begun, max(ended, begun), attrs, error,
                        tuple(_events(task, first, attempts, ended)))
    return TaskSpans(trace_id, env.task_id[:16] if first == 0 and _HEX32.match(env.task_id)
                     else None, parent, sampled, record,
                     tuple(_attempt(task, a, ended) for a in attempts))


def _attempt(task: Task, a: Attempt, ended: float) -> SpanRecord:
    attrs: dict[str, Value] = {
        "reach.task_id": task.task_id, "reach.capability": task.envelope.capability,
        "reach.attempt": a.number, "reach.agent": a.agent, "reach.agent_id": a.agent_id,
        "reach.outcome": a.outcome}
    if a.instance:
        attrs["reach.instance"] = a.instance
    if a.error:
        attrs["reach.error"] = _cut(a.error)
    error = _cut(f"{a.outcome}: {a.error}" if a.error else a.outcome) \
        if a.outcome in _FAILED else None
    end = a.ended_at if a.ended_at is not None else ended  # still running as the task ended
    return SpanRecord(f"{task.envelope.capability} attempt", a.started_at,
                      max(end, a.started_at), attrs, error)


def _events(task: Task, first: int, tried: list[Attempt], ended: float) -> list[SpanEvent]:
    """Queued, retry, fail-over, hedge, replayed and fallback moments of the task's last life."""
    out: list[SpanEvent] = []
    if first:
        out.append(SpanEvent("replayed", task.history[first][1],
                             {"reach.reason": _cut(task.history[first][2])}))
    before = ""
    n = 0  # attempts of this life dispatched so far
    for state, at, note in task.history[first + 1:]:
        if state == S.QUEUED:
            out.append(SpanEvent("queued", at, {"reach.reason": _cut(note)}))
        elif state == S.RETRYING:  # after attempt n failed (0: none could be sent)
            out.append(SpanEvent("retry", at, {"reach.reason": _cut(note),
                                               "reach.attempt": tried[n - 1].number if n else 0}))
        elif state == S.DISPATCHED:
            n += 1
            if before in (S.DISPATCHED, S.RUNNING) and 2 <= n <= len(tried):
                prev, now = tried[n - 2], tried[n - 1]
                attrs: dict[str, Value] = {"reach.attempt": now.number, "reach.agent": now.agent,
                                           "reach.from_agent": prev.agent}
                if prev.ended_at is not None and prev.ended_at <= at:
                    # The previous attempt ended and this one went straight out: a fail-over.
                    attrs["reach.reason"] = _cut(
                        f"{prev.outcome}: {prev.error}" if prev.error else prev.outcome)
                    out.append(SpanEvent("failover", at, attrs))
                else:  # the previous attempt was still running: a hedged read
                    out.append(SpanEvent("hedge", at, attrs))
        before = state
    if task.fallback is not None:
        out.append(SpanEvent("fallback", ended,
                             {"reach.reason": _cut(str(task.fallback.get("reason", ""))),
                              "reach.fallback": str(task.fallback.get("kind", ""))}))
    return out
