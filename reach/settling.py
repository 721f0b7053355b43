"""Settling dead letters: a letter that can never succeed is discarded with a reason, and one
that could with other params or more time is replayed with them (docs/admin-feed.md §4).

Both leave a trace in the task's history, which is stored with it: a discard is a note
``discarded by WHO: REASON`` on the dead task (it stays ``dead``, kept whole, and leaves the
default list, also after a restart), and a replay's change is a note ``replayed by WHO with
new params / timeout T s`` before the replay's own. Params and timeout are written to the
task's row too, so a replay resumed after a restart runs what the operator gave.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from reach.core import names
from reach.core.keys import AMENDED, NEW_PARAMS
from reach.core.tasks import S, Task
from reach.errors import InvalidParams
from reach.gateway.events import DEAD_LETTER
from reach.gateway.gateway import Gateway

DISCARDED = "discarded by "
MAX_REASON = 500  # characters of a discard's reason


def discard_of(task: Task) -> dict[str, Any] | None:
    """``{"reason", "by", "at"}`` of a dead letter's discard, or None: the last discard note,
    unless the task was replayed after it (a replayed letter that dies again is listed)."""
    for state, at, note in reversed(task.history):
        if state == S.PENDING.value:
            return None
        if note.startswith(DISCARDED):
            by, _, reason = note[len(DISCARDED):].partition(": ")
            return {"reason": reason, "by": by, "at": at}
    return None


class Discarded:
    """The discarded letters kept in memory, oldest out first past ``limit`` (their rows stay
    in the store, where ``find`` and ``task`` read them)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.tasks: OrderedDict[str, Task] = OrderedDict()

    def keep(self, task: Task) -> None:
        self.tasks[task.task_id] = task
        self.tasks.move_to_end(task.task_id)
        while len(self.tasks) > self.limit:
            self.tasks.popitem(last=False)

    def settled(self, task: Task) -> bool:
        """Whether ``task`` (a stored dead letter read back) was discarded: then it is kept
        here and not listed among the dead letters."""
        if discard_of(task) is None:
            return False
        self.keep(task)
        return True


def discard(gateway: Gateway, kept: Discarded, task: Task, reason: str, by: str,
            now: float) -> None:
    """Settle the dead letter ``task``: noted in its history, written behind, out of the
    list (the admin feed hears ``resolved``) and into ``kept``."""
    reason = " ".join(str(reason).split())
    if not reason:
        raise InvalidParams("a discard needs a reason (what was checked, why it can never "
                            "succeed): it is kept with the letter and audited")
    if len(reason) > MAX_REASON:
        raise InvalidParams(f"the reason is {len(reason)} characters; at most {MAX_REASON}")
    if task.state is not S.DEAD or gateway.outcome(task.task_id) is not None:
        raise InvalidParams(f"{task.task_id!r} is not an unresolved dead letter (it is "
                            f"{task.state.value}); see reach.dead_letters()")
    earlier = discard_of(task)
    if earlier is not None:
        raise InvalidParams(f"{task.task_id!r} was discarded already, by {earlier['by']}: "
                            f"{earlier['reason']}")
    task.history.append((S.DEAD.value, now, f"{DISCARDED}{by}: {reason}"))
    gateway.store.update(task)
    if gateway.book.unkeep_dead(task.task_id) is not None:
        gateway.events.publish(DEAD_LETTER, {"action": "resolved", "task_id": task.task_id})
    kept.keep(task)


def amend(gateway: Gateway, task: Task, params: Any, timeout: Any, by: str,
          now: float) -> str:
    """Give a dead letter new ``params`` (checked against the capability's schema as a
    submit's are, for its own caller) and/or a new ``timeout`` (seconds, from the replay)
    before it is replayed; returns the history note that records the change."""
    env = task.envelope
    changes = []
    if params is not None:
        if not isinstance(params, dict):
            raise InvalidParams(f"params must be a JSON object, not {type(params).__name__}")
        cap = names.normalize(env.capability)
        gateway.router.admit(cap, params, env.caller, gateway.registry.declaring(cap),
                             gateway.registry.names)
        changes.append(NEW_PARAMS.removeprefix(" with "))
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
                0 < timeout <= 7 * 24 * 3600):
            raise InvalidParams(f"timeout must be a number of seconds above 0 (at most a "
                                f"week), not {timeout!r}")
        changes.append(f"timeout {float(timeout):g} s")
    if params is not None:
        env.params = params
        env.revision += 1  # a new key for agents: see keys.revision
    if timeout is not None:
        env.timeout = float(timeout)  # a replay's deadline runs from the replay
    note = f"{AMENDED}{by} with {' and '.join(changes)}"
    task.history.append((S.DEAD.value, now, note))
    return note
