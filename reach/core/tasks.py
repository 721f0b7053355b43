"""Tasks: the envelope a caller submits and the state machine it moves through (pure).

    pending ──► queued ──► dispatched ──► running ──► succeeded
       │          │            │             │    ╲
       │          │            │             │     ► failed     (a TaskError answer, rejected)
       │          ▼            ▼             ▼
       └──────► retrying ◄─────┴─────────────┘ ──► dead        (attempts exhausted: dead letter)
                 ↺ (another backoff round while no agent is available)
                                                    │
                         replay: dead ──► pending ◄─┘
    (any state before an outcome ──► succeeded: answered by the task's fallback)

``pending`` means committed to the store and acknowledged. Every transition is recorded with
the time it happened (the time is passed in; nothing here reads a clock).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.core.chains import Link, Step, steps_json, view_of
from reach.core.keys import unscoped_key


class TaskState(enum.StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"  # its caller (or an operator) cancelled it: not a dead letter


S = TaskState
# Each state's text: what a transition records in the history and the store writes, read here
# by a dict lookup (an enum's ``.value`` is two Python calls, several times per task).
VALUE: dict[TaskState, str] = {s: s.value for s in TaskState}
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.DEAD, S.CANCELLED})
_ACTIVE = (S.QUEUED, S.DISPATCHED, S.RUNNING, S.RETRYING)

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    # ... → succeeded without a dispatch: answered by its fallback (reach.core.fallback)
    # Any unfinished state → cancelled (the caller or an operator cancelled it).
    S.PENDING: frozenset({S.QUEUED, S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED, S.DEAD,
                          S.CANCELLED}),
    S.QUEUED: frozenset({S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED, S.DEAD,
                         S.CANCELLED}),
    S.DISPATCHED: frozenset({S.RUNNING, S.SUCCEEDED, S.FAILED, S.RETRYING, S.DEAD, S.QUEUED,
                             S.DISPATCHED, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.RETRYING, S.DEAD, S.QUEUED, S.DISPATCHED,
                          S.CANCELLED}),
    S.RETRYING: frozenset({S.QUEUED, S.DISPATCHED, S.RETRYING, S.SUCCEEDED, S.FAILED,
                           S.DEAD, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.DEAD: frozenset({S.PENDING}),
    S.CANCELLED: frozenset(),
}


class InvalidTransition(ValueError):
    """A state change the table does not allow: a bug in the caller, never a user error."""


def can_move(src: TaskState, dst: TaskState) -> bool:
    return dst in TRANSITIONS[src]


class Outcome(enum.StrEnum):
    """How one attempt ended (``Attempt.outcome``); stored and shown as its value."""

    RUNNING = "running"          # not ended yet
    OK = "ok"                    # a result
    ANSWER = "answer"            # a deliberate TaskError answer: final, not the agent's fault
    FAULT = "fault"              # the handler raised anything else
    TIMEOUT = "timeout"          # acknowledged, no result within the completion timeout
    LOST = "lost"                # acknowledged, then the link went away
    UNDELIVERED = "undelivered"  # never acknowledged (or refused before it ran)
    CANCELLED = "cancelled"      # stopped by the coordinator (a hedge lost, a stop)


@dataclass(slots=True)
class SubmitRequest:
    """What a caller asks for, as it travels from the client SDK through the edge to the
    gateway, which turns it into an ``Envelope``. ``caller`` is set by the edge from the
    authenticated connection, never by the caller itself. Not changed once built (not
    ``frozen``: a frozen dataclass costs ~1.5 µs more to build, once per call)."""

    capability: str  # "" when ``intent`` names the work instead
    params: dict[str, Any] = field(default_factory=dict)
    caller: str = ""
    idempotency_key: str | None = None
    priority: int = 5
    timeout: float | None = None
    max_retries: int | None = None  # None: the coordinator's max_retries
    trace_id: str | None = None
    parent_task_id: str | None = None
    traceparent: str | None = None
    intent: str | None = None
    hedge: bool | None = None
    tags: Mapping[str, str | bool] | None = None  # only agents declaring them (core.tags)
    fallback: dict[str, Any] | None = None  # this call's fallback (reach.core.fallback)
    routed: bool = False  # ``capability`` was found for ``intent`` by the coordinator itself
    # How long the task may wait its turn for a free slot or a routable agent; None: a
    # submit's wait (until its deadline, else ``max_wait``) or a call's (``queue_wait``).
    queue_wait: float | None = None
    # A synchronous call (the caller waits for the answer): without its own ``queue_wait`` it
    # waits ``queue_wait`` for a slot and fails fast when no agent can take it.
    call: bool = False
    notify: str | None = None  # the URL its outcome is POSTed to when it ends (webhooks)
    then: Any = None  # the chain's steps after it, as given (reach.core.chains.steps_of)
    link: Link | None = None  # its place in a chain: set by the coordinator for its steps


@dataclass(slots=True)
class Envelope:
    """What a caller asked for; never changes after submit."""

    task_id: str
    trace_id: str
    capability: str
    params: dict[str, Any]
    caller: str
    idempotency_key: str
    priority: int = 5
    timeout: float | None = None
    max_retries: int = 2
    created_at: float = 0.0
    parent_task_id: str | None = None
    traceparent: str | None = None
    hedge: bool | None = None  # None: as the capability declares (not stored: a resumed task
    #                            hedges as its capability declares)
    tags: dict[str, str | bool] | None = None  # routing tags (stored: a resumed task keeps them)
    # The fallback it follows if it cannot be answered: a reach.core.fallback.Plan, None (none
    # chosen at submit) or False (a fallback's own task: none, ever). Not stored: a resumed
    # task falls back as its capability declares.
    fallback: Any = None
    # Replays that gave it new params (reach.settling): agents see the key "<key>~N". Not
    # stored as such: counted from the stored history when the row is read (keys.revision).
    revision: int = 0
    # The caller's span: the parent id of the traceparent it gave (``traceparent`` above is
    # the one agents get, naming this task). An exported task span's parent (reach.server.otel);
    # not stored: a resumed task's span has the trace but no parent span.
    parent_span: str | None = None
    # How long it may wait its turn (a free slot, a routable agent) from each pick; None: a
    # submit's backlog wait, until its deadline, else ``max_wait`` from its submit. Not
    # stored: a resumed task waits as a submit does.
    queue_wait: float | None = None
    fail_fast: bool = False  # no agent can take it: fail now (a call that did not ask to wait)
    # Where its outcome goes besides its caller (stored in the row's ``follow`` column): the
    # webhook URL, the chain's steps after it, and its own place in a chain.
    notify: str | None = None
    then: tuple[Step, ...] = ()
    link: Link | None = None

    def follow(self) -> dict[str, Any]:
        """Where its outcome goes besides its caller, as stored and shown: ``notify``, the
        chain's steps after it (``then``) and its place in a chain (``chain``)."""
        out: dict[str, Any] = {}
        if self.notify is not None:
            out["notify"] = self.notify
        if self.then:
            out["then"] = steps_json(self.then)
        if self.link is not None:
            out["chain"] = self.link.to_json()
        return out

    def to_dict(self) -> dict[str, Any]:
        out = {
            "task_id": self.task_id, "trace_id": self.trace_id, "capability": self.capability,
            "params": self.params, "caller": self.caller,
            # As the caller gave it; the coordinator keeps it scoped to the caller (trust).
            "idempotency_key": unscoped_key(self.caller, self.idempotency_key),
            "priority": self.priority,
            "timeout": self.timeout, "max_retries": self.max_retries,
            "created_at": self.created_at, "parent_task_id": self.parent_task_id,
            "traceparent": self.traceparent,
        }
        if self.notify is not None or self.then or self.link is not None:
            out.update(self.follow())
        return out


@dataclass(slots=True)
class Attempt:
    """One delivery of a task to one agent."""

    number: int
    agent_id: str
    agent: str
    started_at: float
    ended_at: float | None = None
    outcome: str = Outcome.RUNNING.value  # an ``Outcome`` value, kept as a plain str
    error: str | None = None
    instance: str | None = None  # the agent process it went to (Register.instance)
    # The completion timeout it was given (s): stored, so that a resumed task keeps it
    # (policy.kept_timeout). None in rows written before it was recorded.
    timeout: float | None = None

    def to_dict(self) -> dict[str, Any]:
        duration = None if self.ended_at is None else round(
            (self.ended_at - self.started_at) * 1000, 3)
        return {"number": self.number, "agent_id": self.agent_id, "agent": self.agent,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "duration_ms": duration, "outcome": self.outcome, "error": self.error,
                "instance": self.instance, "timeout": self.timeout}


@dataclass(slots=True)
class Task:
    """A task's live record: its envelope, state, attempts and every timed transition."""

    envelope: Envelope
    state: TaskState = S.PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    attempts: list[Attempt] = field(default_factory=list)
    history: list[tuple[str, float, str]] = field(default_factory=list)
    updated_at: float = 0.0
    fallback: dict[str, Any] | None = None  # set when its result is a fallback (its label)
    # The envelope's, copied once: read ~16 times per call (book, sessions, store), where a
    # property was a Python call each time. An envelope's task id never changes.
    task_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.task_id = self.envelope.task_id

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def move(self, dst: TaskState, now: float, note: str = "") -> None:
        """Apply one transition, or raise ``InvalidTransition``."""
        if dst not in TRANSITIONS[self.state]:
            raise InvalidTransition(f"{self.task_id}: {self.state.value} -> {dst.value}")
        self.state = dst
        self.updated_at = now
        self.history.append((VALUE[dst], now, note))

    def view(self) -> dict[str, Any]:
        """The JSON-able status a caller or operator sees (a chain's task: with ``chain``,
        its place and where the chain went on, reach.core.chains.view_of)."""
        env = self.envelope
        out = {
            **self.envelope.to_dict(),
            "state": self.state.value,
            "result": self.result,
            "error": self.error,
            "attempts": [a.to_dict() for a in self.attempts],
            "history": [{"state": s, "at": t, "note": n} for s, t, n in self.history],
            "updated_at": self.updated_at,
            "fallback": self.fallback,
        }
        if env.then or env.link is not None:
            out["chain"] = view_of(self.task_id, env.then, env.link, self.history)
        return out


_PENDING = S.PENDING.value


def new_task(envelope: Envelope, now: float) -> Task:
    task = Task(envelope=envelope, updated_at=now)
    task.history.append((_PENDING, now, "accepted"))
    return task
