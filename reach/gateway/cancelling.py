"""Cancelling a task (issue 27): its caller or an operator ends it before it ends by itself.

The task ends at once in state ``cancelled`` (not a dead letter: nothing failed), whoever
waits on it hears ``Cancelled``, and its life stops wherever it is: a wait for a slot or an
agent is left, an attempt in flight is given up and its agent told to stop (a ``cancel``
frame; an HTTP adapter aborts its request, a process adapter ends its process). A task that
has ended already is left as it is: a cancel after the end changes nothing.
"""

from __future__ import annotations

from typing import Protocol

from reach.core.tasks import Outcome, Task, TaskState
from reach.errors import Cancelled, ReachError, Unauthorized, Unavailable
from reach.gateway.book import TaskBook
from reach.gateway.crew import Crew


class Cancels(Protocol):
    def cancel(self, task_id: str, by: str, reason: str = "") -> Task | None: ...


class Ender(Protocol):
    def finish(self, task: Task, state: TaskState, *, error: ReachError | None = None,
               fall_back: bool = True) -> None: ...


def cancel(gateway: Ender, book: TaskBook, crew: Crew, task_id: str, by: str, now: float,
           reason: str = "") -> Task | None:
    """Cancel the live task ``task_id`` on behalf of ``by`` (a caller's or operator's name)
    at ``now`` (the wall clock). Returns the task, ended (cancelled now, or already ended by
    itself), or None when this coordinator does not hold it live."""
    task = book.live.get(task_id)
    if task is None or task.terminal:
        return task
    why = f"cancelled by {by}" + (f": {reason}" if reason else "")
    for attempt in task.attempts:  # (stored so: the attempt did not fail, it was stopped)
        if attempt.outcome == Outcome.RUNNING:
            attempt.outcome, attempt.ended_at, attempt.error = Outcome.CANCELLED.value, now, why
    # Ended first, so that the attempt the run gives up below is told to its agent (an
    # attempt abandoned at a stop is not: reach.gateway.dispatch ``abandon``).
    gateway.finish(task, TaskState.CANCELLED, error=Cancelled(
        why, task_id=task_id, capability=task.envelope.capability, by=by), fall_back=False)
    crew.cancel_named({f"task-{task_id}"})
    return task


def cancel_known(gateway: Cancels, task: Task, by: str, reason: str = "", *,
                 owner: str | None = None) -> Task:
    """Cancel ``task`` (as its door found it: live here, or read from the store) for ``by``,
    and return it as it is after the cancel (ended first by itself: as it ended). ``owner``:
    the caller asking, who must be the one that submitted it (an operator passes None).
    Raises ``Unauthorized`` for another caller's task, and ``elsewhere`` for an unfinished
    task this coordinator does not run. Every door's cancel goes through here."""
    if owner is not None and task.envelope.caller != owner:  # (it ran it: it may read it)
        raise Unauthorized(
            f"task {task.task_id!r} is {task.envelope.caller!r}'s; only its caller (or an "
            f"operator: reach cancel) may cancel it", task_id=task.task_id)
    done = gateway.cancel(task.task_id, by, reason)
    if done is None and not task.terminal:
        raise elsewhere(task)
    return done or task


def elsewhere(task: Task) -> Unavailable:
    """Why a task that is not finished cannot be cancelled here: another coordinator of the
    cluster runs it (a cancel reaches the tasks of the coordinator it is sent to)."""
    return Unavailable(
        f"task {task.task_id!r} is run by another coordinator of this cluster, not this one; "
        f"send the cancel to that coordinator", task_id=task.task_id)
