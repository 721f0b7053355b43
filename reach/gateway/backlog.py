"""The backlog: accepted tasks waiting their turn (state ``queued``), per capability.

A task is in it from the moment it moves into ``queued`` (waiting for a free slot, or for an
agent that can take it) until it moves on, ends or leaves this coordinator (let go, a failed
insert). The door bounds it (``max_backlog``, ``max_backlog_age``: reach.gateway.admission),
and ``reach.metrics()``, ``/metrics``, the admin feed and the ``backlog_age`` alert read it.
Each capability's tasks are kept in the order they began to wait, so the longest waiting is
the first: the door's test costs the same for ten tasks or ten thousand.
"""

from __future__ import annotations

from reach.core.tasks import Task


class Backlog:
    __slots__ = ("tasks",)

    def __init__(self) -> None:
        # capability → task id → when it was submitted (wall clock), in the order they began
        # to wait; a capability with none waiting has no entry
        self.tasks: dict[str, dict[str, float]] = {}

    # (A task enters where it moves into ``queued``: ``TaskBook.moved``, inline.)

    def leave(self, task: Task) -> None:
        """``task`` left this coordinator while it waited (let go, its insert failed)."""
        cap = task.envelope.capability
        waiting = self.tasks.get(cap)
        if waiting is not None:
            waiting.pop(task.task_id, None)
            if not waiting:
                del self.tasks[cap]

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
