"""The backlog: accepted tasks waiting their turn (state ``queued``), per capability.

A task is in it from the moment it moves into ``queued`` (waiting for a free slot, or for an
agent that can take it) until it moves on, ends or leaves this coordinator (let go, a failed
insert). The door bounds it (``max_backlog``, ``max_backlog_age``: reach.gateway.admission),
and ``reach.metrics()``, ``/metrics``, the admin feed and the ``backlog_age`` alert read it.
Each capability's tasks are kept in the order they began to wait, so the longest waiting is
the first: the door's test costs the same for ten tasks or ten thousand.
"""

from __future__ import annotations

from collections.abc import Mapping

from reach.core.tasks import Task, TaskState

QUEUED = TaskState.QUEUED


class Backlog:
    __slots__ = ("tasks", "_live")

    def __init__(self, live: Mapping[str, Task]) -> None:
        # capability → task id → when it was submitted (wall clock), in the order they began
        # to wait; a capability with none waiting has no entry
        self.tasks: dict[str, dict[str, float]] = {}
        self._live = live  # the coordinator's live tasks (TaskBook.live): only they count

    def moved(self, task: Task, before: TaskState) -> None:
        """A task moved into or out of ``queued`` (``Gateway.move``)."""
        if task.task_id in self._live:
            if before is QUEUED:
                self.leave(task)
            if task.state is QUEUED:
                env, tasks = task.envelope, self.tasks
                if env.capability in tasks:
                    tasks[env.capability][task.task_id] = env.created_at
                else:
                    tasks[env.capability] = {task.task_id: env.created_at}

    def leave(self, task: Task) -> None:
        """``task`` stopped waiting: it moved on, or left this coordinator while it waited
        (let go, its insert failed). (No call inside: one for each task that stops.)"""
        cap, tasks = task.envelope.capability, self.tasks
        if cap in tasks:
            waiting = tasks[cap]
            if task.task_id in waiting:
                del waiting[task.task_id]
            if not waiting:
                del tasks[cap]

    def depth(self, capability: str) -> int:
        return len(self.tasks.get(capability) or ())

    def oldest(self, capability: str, now: float) -> float:
        """How long (s, since its submit) the task of ``capability`` that has waited longest
        has been waiting; 0 for none. (``now``: the wall clock.)"""
        waiting = self.tasks.get(capability)
        return now - next(iter(waiting.values())) if waiting else 0.0

    def view(self, now: float) -> dict[str, tuple[int, float]]:
        """capability → how many of its tasks wait their turn, and ``oldest``'s age."""
        return {cap: (len(w), self.oldest(cap, now)) for cap, w in self.tasks.items()}
