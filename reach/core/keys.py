"""Idempotency keys are private to their caller (pure; docs/security.md).

The same key from two callers names two pieces of work: otherwise one caller could read
another's result by reusing its key, and an agent's key cache would answer one caller with
another's outcome. The coordinator keeps, stores and sends keys as ``<caller>/<key>``; a
handler's ``ctx.idempotency_key`` and every view show the key as the caller gave it.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import quote


def scoped_key(caller: str, key: str) -> str:
    """The idempotency key as the coordinator keeps and sends it: private to ``caller``. The
    caller is percent-encoded, so the first ``/`` separates the two unambiguously."""
    return f"{_prefix(caller)}{key}"


def unscoped_key(caller: str, key: str) -> str:
    """The key as ``caller`` gave it (what a handler's ``ctx.idempotency_key`` shows); agents
    keep their caches by the scoped key the invoke carries."""
    prefix = _prefix(caller)
    return key[len(prefix):] if key.startswith(prefix) else key


def in_scope(caller: str, key: str, task_id: str) -> bool:
    """Whether ``key`` may travel with ``caller``'s work: scoped to that caller, or the task's
    own id (a task submitted without a key). A key scoped to someone else would let an
    agent's key cache answer ``caller`` with another caller's outcome."""
    return key == task_id or key.startswith(_prefix(caller)) or key.startswith(task_id + "~")


AMENDED = "replayed by "  # a history note: a dead letter replayed with changes (settling)
NEW_PARAMS = " with new params"


def revision(history: list[tuple[str, float, str]]) -> int:
    """How many replays gave the task new params: its agents see the key ``<key>~N``, so an
    agent that still holds (or cached) the old params' run under the key does not answer the
    new params with it."""
    return sum(1 for _, _, note in history
               if note.startswith(AMENDED) and NEW_PARAMS in note)


def revised(key: str, revision: int) -> str:
    """The key agents see for a task's ``revision`` (see ``revision``)."""
    return f"{key}~{revision}"


@lru_cache(maxsize=4096)
def _prefix(caller: str) -> str:
    return f"{quote(caller, safe='')}/"  # (on every submit and invoke: callers are few)
