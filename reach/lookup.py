"""Finding tasks and traces past what memory holds: the store answers for the rest.

Memory keeps the recent finished tasks (``recent_tasks``, ``recent_bytes``) and the traces
they belong to; the store keeps every task. ``Lookup`` puts the newest traces back into
memory when a coordinator starts (so the admin feed's trace list and its waterfalls survive a
restart), reads an older trace from the store when asked for it, and finds a task or trace by
its id or a head of one (the dashboard's "go to"). ``reach.ops.Ops`` delegates here.
"""

from __future__ import annotations

from typing import Any, Protocol

from reach.config import Settings
from reach.core import traces
from reach.core.tasks import Task, TaskState
from reach.errors import InvalidParams
from reach.gateway.gateway import Gateway
from reach.server.display import TraceView

MIN_PREFIX = 6
"""The shortest id head ``find`` looks up (the dashboard shows ids cut to 10 characters)."""


class TraceStore(Protocol):
    """What the lookup reads from the store (``reach.store.store.Store`` has it)."""

    async def trace_tasks(self, trace_ids: list[str]) -> list[Task]: ...

    async def recent_traces(self, limit: int, scan: int = 5_000) -> list[Task]: ...

    async def match(self, prefix: str, limit: int = 2) -> tuple[list[str], list[str]]: ...


class Lookup:
    """Traces and tasks by id, from memory first, then from ``store`` (None: memory only)."""

    def __init__(self, settings: Settings, gateway: Gateway,
                 store: TraceStore | None = None) -> None:
        self.settings = settings
        self.gateway = gateway
        self.store = store

    async def restore_traces(self) -> int:
        """At start: the tasks of the ``recent_traces`` newest traces, back from the store
        into the trace list (before unfinished tasks are resumed); returns how many traces."""
        if self.store is None:
            return 0
        tasks = await self.store.recent_traces(self.settings.recent_traces)
        for task in tasks:
            self.gateway.book.restore(task)
        return len({t.envelope.trace_id for t in tasks})

    def in_memory(self, trace_id: str) -> list[Task]:
        return [t for tid in self.gateway.traces.get(trace_id, ())
                if (t := self.gateway.find(tid)) is not None]

    async def tasks(self, trace_id: str) -> list[Task]:
        """A trace's tasks from memory; from the store when memory holds none of them."""
        tasks = self.in_memory(trace_id)
        if tasks or self.store is None:
            return tasks
        return await self.store.trace_tasks([trace_id])

    async def find_trace(self, trace_id: str) -> TraceView:
        """Any trace's events and timeline (empty for an unknown id, as ``trace()``)."""
        tasks = await self.tasks(trace_id)
        events = sorted((e for t in tasks for e in task_events(t)), key=lambda e: e["at"])
        return TraceView(events, traces.timeline(trace_id, tasks))

    async def find(self, ident: str) -> dict[str, Any]:
        """Go to a task or a trace by its id, or by a head of it (at least ``MIN_PREFIX``
        characters) that names just one: the trace's ``summary`` and ``timeline``, the
        ``task_id`` meant (None for a trace id), and whether it is an unresolved
        ``dead_letter``. Every task the store has can be found."""
        ident = ident.strip().lower()
        if len(ident) < MIN_PREFIX:
            raise InvalidParams(f"give at least {MIN_PREFIX} characters of a task or trace "
                                f"id, not {ident!r}")
        task_id, trace_id = await self._resolve(ident)
        tasks = await self.tasks(trace_id)
        # By its state, not by the in-memory list: a letter past dead_letters_max,
        # dead_letter_bytes or the retention left the list but is one still (replay runs it).
        task = None if task_id is None else await self.gateway.task(task_id)
        return {"trace_id": trace_id, "task_id": task_id,
                "dead_letter": task is not None and (task.task_id in self.gateway.dead
                                                     or task.state is TaskState.DEAD),
                "summary": traces.summary(trace_id, tasks),
                "timeline": traces.timeline(trace_id, tasks)}

    async def _resolve(self, ident: str) -> tuple[str | None, str]:
        """(task id or None, trace id) for an id or a head of one; InvalidParams when it names
        nothing, or more than one."""
        task = await self.gateway.task(ident)
        if task is not None:
            return task.task_id, task.envelope.trace_id
        if ident in self.gateway.traces:
            return None, ident
        book = self.gateway.book
        task_ids = {tid for known in (book.live, book.recent, book.dead) for tid in known
                    if tid.startswith(ident)}
        trace_ids = {t for t in self.gateway.traces if t.startswith(ident)}
        if self.store is not None:
            stored_tasks, stored_traces = await self.store.match(ident)
            task_ids.update(stored_tasks)
            trace_ids.update(stored_traces)
        if len(task_ids) > 1 or len(trace_ids) > 1:
            raise InvalidParams(f"{ident!r} starts more than one id; give more of it")
        found: dict[str, str | None] = dict.fromkeys(trace_ids)
        for tid in task_ids:
            hit = await self.gateway.task(tid)
            if hit is not None:
                found[hit.envelope.trace_id] = hit.task_id
        if not found:
            raise InvalidParams(f"no task or trace id starts with {ident!r}")
        if len(found) > 1:
            raise InvalidParams(f"{ident!r} starts a task id and a trace id of another "
                                f"trace; give more of it")
        ((trace_id, task_id),) = found.items()
        return task_id, trace_id


def task_events(task: Task) -> list[dict[str, Any]]:
    """A task's transitions as the events of ``reach.trace()``."""
    env = task.envelope
    return [{"task_id": env.task_id, "parent_task_id": env.parent_task_id,
             "capability": env.capability, "caller": env.caller, "state": state, "at": at,
             "note": note} for state, at, note in task.history]
