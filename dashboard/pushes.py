"""Following a replay of A2A push notifications to its outcome, without a socket or a clock.

``replay_pushes`` answers at once with the tasks whose notifications go out again; whether
each arrives is known only later, and only by its absence: one that fails again (after its
tries) is back on the ``push_dead_letters`` list with its new reason. So the app notes the
notifications it sent again (:meth:`Replays.sent`), and each read of the list tells it which
came back (:meth:`Replays.read`). Commands on the feed run concurrently on the coordinator, so
a read asked before a replay's answer may describe the list before the replay: such a read is
stale (:attr:`Replays.generation`) and dropped, or a notification on its way would flash back.
"""

from __future__ import annotations

from .model import PushLetter
from .rows import plural, short

FOLLOW_S = 120.0
"""How long (coordinator clock) a notification sent again is watched for coming back: past
the sender's five tries of 10 s each and their backoff (reach/server/a2a_push.py)."""


class Replays:
    """The push notifications sent again and not yet seen back on the list."""

    def __init__(self) -> None:
        self.generation = 0
        """Bumped when a replay is asked and when it is answered: a read begun before the
        answer is stale."""
        self.following: dict[str, tuple[float, PushLetter]] = {}
        """Keys of notifications sent again → when (feed clock) and what they were."""

    def asked(self) -> None:
        """A replay command is on its way."""
        self.generation += 1

    def sent(self, letters: list[PushLetter], at: float) -> None:
        """The replay was answered: these notifications are on their way again."""
        self.generation += 1
        for letter in letters:
            self.following[letter.key] = (at, letter)

    def read(self, generation: int, letters: list[PushLetter], at: float
             ) -> list[PushLetter] | None:
        """A read of the list, begun at ``generation``, answered ``letters``: the followed
        ones that came back (failed again), or None when the read is stale. Notifications
        followed longer than :data:`FOLLOW_S` are let go."""
        if generation != self.generation:
            return None
        back = [letter for letter in letters if letter.key in self.following]
        for letter in back:
            del self.following[letter.key]
        self.following = {k: v for k, v in self.following.items() if at - v[0] <= FOLLOW_S}
        return back

    def __bool__(self) -> bool:
        return bool(self.following)


def question(task_ids: list[str], count: int, everything: bool) -> str:
    """The yes/no question before notifications are sent again."""
    if len(task_ids) == 1 and not everything:
        what = f"{plural(count, 'push notification')} of task {short(task_ids[0])}"
    else:
        which = "every one" if everything else "those the filter shows"
        what = f"{plural(count, 'push notification')} ({which}, {plural(len(task_ids), 'task')})"
    return (f"Send {what} again? Each gets its tries; one that fails again is listed "
            f"again.")


def sent_note(replayed: list[str], refused: list[str]) -> tuple[str, bool]:
    """The outcome of a replay command, and whether it is bad news."""
    if not replayed and not refused:
        return "nothing sent again: those notifications were delivered or deleted meanwhile", True
    parts = []
    if replayed:
        tasks = sorted(set(replayed))
        whose = f" of task {short(tasks[0])}" if len(tasks) == 1 else ""
        parts.append(f"sending {plural(len(replayed), 'push notification')}{whose} again; "
                     f"one that fails again comes back to the list")
    if refused:
        parts.append(f"not sent: {'; '.join(refused)}")
    return " · ".join(parts), bool(refused)


def back_note(back: list[PushLetter]) -> str:
    """The notifications sent again that failed again."""
    first = back[0]
    if len(back) == 1:
        return f"push of task {short(first.task_id)} not delivered again: {first.reason}"
    return (f"{plural(len(back), 'push notification')} not delivered again "
            f"(task {short(first.task_id)}: {first.reason}, …)")
