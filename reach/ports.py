"""The seams between the gateway and the world: interfaces only, no implementations.

The gateway (reach.gateway) decides and drives; it reaches agents through ``AgentLink``, keeps
tasks through ``TaskStore`` and tells time through ``Clock``. Each port is what the gateway
needs and nothing more, so an HTTP service, a child process, a queue worker, an MCP or A2A
server or a peer coordinator can stand behind it with the same guarantees as a websocket agent
(DESIGN.md, "Every agent is an AgentLink"). ``reach.testing`` ships fakes of all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from reach.core.tasks import Task


@dataclass(slots=True)
class Work:
    """One attempt's work as an agent receives it (the invoke of docs/protocol.md §4)."""

    task_id: str
    attempt: int
    capability: str
    params: dict[str, Any]
    idempotency_key: str
    trace_id: str
    caller: str
    parent_task_id: str | None = None
    traceparent: str | None = None
    deadline_ms: float | None = None  # the caller's time left, when it gave one


class Reply(Protocol):
    """Where an ``AgentLink`` reports what became of one delivered ``Work``.

    ``resolve`` kinds: ``ok`` (payload = result), ``error`` (payload = the wire error, whose
    ``details.answer`` marks a deliberate answer), ``lost`` (the link went away) and
    ``undelivered`` (the link knows the work never reached the agent: fail over at once). Timers for
    the ack and completion deadlines belong to the gateway, not the link."""

    def ack(self) -> None: ...

    def chunk(self, seq: int, data: Any) -> None: ...

    def resolve(self, kind: str, payload: Any = None) -> None: ...


class AgentLink(Protocol):
    """What the gateway needs of any agent, whatever carries the work to it."""

    def deliver(self, work: Work, reply: Reply) -> bool:
        """Start sending ``work``; False when this link can no longer carry it (then nothing
        was sent and the gateway fails over at once). Never blocks."""
        ...

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        """The gateway no longer waits for this attempt (answered, timed out, a hedge lost, the
        task cancelled, a stop): forget it, and, when ``tell``, have the agent stop it where
        the link can. (Not at a stop or a let-go: the task resumes and goes back to that
        agent, whose key cache knows it; a stopped run would be forgotten and run again.)"""
        ...

    def close(self, reason: str) -> Awaitable[None]:
        """End the link (the agent was replaced, drained or the coordinator stops)."""
        ...


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """What arms a deadline: a ``Clock``, or the gateway's one heap of them
    (``reach.gateway.deadlines.Deadlines``)."""

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer: ...


class Clock(Protocol):
    """The coordinator's one time base: ``wall`` for what is recorded (task history, breaker
    and budget windows, events), ``now`` (monotonic) for what is timed (deadlines, backoff,
    queue waits). A fake clock (``reach.testing.ManualClock``) drives every timeout."""

    def wall(self) -> float: ...

    def now(self) -> float: ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` once ``now()`` reaches ``when``."""
        ...

    async def sleep(self, delay: float) -> None: ...


class DuplicateKey(Exception):
    """What a ``TaskStore.insert`` future fails with when the task's idempotency key is
    already held by a committed task (one another coordinator of a cluster accepted first):
    the task was not stored, and the submit is a duplicate of ``first_task_id``."""

    def __init__(self, key: str, first_task_id: str) -> None:
        super().__init__(f"idempotency key {key!r} is already held by task {first_task_id}")
        self.key = key
        self.first_task_id = first_task_id


class TaskStore(Protocol):
    """Durable tasks: an acknowledged task's row is committed before the caller hears of it."""

    def insert(self, task: Task) -> asyncio.Future[None]:
        """Queue the first write of a task; the future completes once it is committed (the
        gateway acknowledges the task from its done-callback, without a coroutine), or fails
        with ``DuplicateKey`` when another task holds its key."""
        ...

    def update(self, task: Task) -> None:
        """Queue a write of the task's current state (it rides the next group commit)."""
        ...

    def persist(self, task: Task) -> asyncio.Future[None]:
        """Queue a write of the task's current state; completes once it is committed."""
        ...

    async def get(self, task_id: str) -> Task | None: ...

    async def open(self) -> None: ...

    async def close(self) -> None:
        """Commit what is queued, then release the database."""
        ...

    async def unfinished(self) -> list[Task]:
        """Tasks a stopped coordinator left unfinished: resumed at start."""
        ...

    async def chained(self, since: float) -> list[Task]:
        """Succeeded chain tasks created since ``since``: a restart starts the next step of
        those whose next step never started (reach.gateway.chaining)."""
        ...

    async def dead(self, limit: int = 10_000, since: float | None = None) -> list[Task]: ...

    async def amend(self, task: Task) -> None:
        """Write a dead letter's new params and timeout (a settled replay's) now."""
        ...

    async def keys_since(self, since: float, limit: int | None = None
                         ) -> list[tuple[str, str, float]]:
        """(idempotency key, task id, created) of tasks created since ``since``."""
        ...

    async def agent_ids(self) -> dict[str, str]:
        """Agent name → its stable id (identity survives restarts)."""
        ...

    async def declared(self) -> dict[str, list[str]]:
        """Agent name → the capability names it declared when it last registered."""
        ...

    async def save_agent(self, agent_id: str, name: str, version: str,
                         capabilities: list[Any], max_concurrency: int, now: float) -> None: ...


@dataclass(frozen=True)
class TaskPage:
    """A page of one caller's tasks, newest first (what A2A ``ListTasks`` reads from a store,
    reach.store.listing): ``next`` is the (created_at, task_id) cursor of the page after
    (None: this is the last); ``total``: how many match, over the caller's newest ``scan``."""

    tasks: list[Task]
    total: int
    next: tuple[float, str] | None
