"""What the one sender of notifications (``reach.server.pushes``) keeps: its configs in the
store, as the store reads them back, and the notifications it could not deliver (dead letters).

A config (``Push``) is of a kind: an A2A push notification config (``"a2a"``, the A2A door's)
or a task's completion webhook (``"webhook"``, ``notify`` at submit). Its body is the kind's
own JSON, kept as it is; a webhook's names its kind (``{"kind": "webhook", ...}``), an A2A
config's is the A2A SDK's JSON and names none."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from reach.core.tasks import Task

A2A, WEBHOOK = "a2a", "webhook"


class Kept(Protocol):
    """One kept config as the store reads it back (``reach.store.pushes.Kept``)."""

    @property
    def task_id(self) -> str: ...

    @property
    def body(self) -> str: ...

    @property
    def dead(self) -> str | None: ...  # why it was not delivered (None: not yet sent)

    @property
    def dead_at(self) -> float: ...

    @property
    def node(self) -> str | None: ...  # the cluster node that sends it


class PushConfigStore(Protocol):
    """Where configs are kept across a restart (``reach.store.store.Store`` has it)."""

    node_id: str | None  # the cluster node whose configs these are (None: alone)

    async def push_configs(self, limit: int, *, dead_only: bool = False,
                           everywhere: bool = False) -> Sequence[Kept]: ...

    async def task_push_configs(self, task_id: str, limit: int) -> Sequence[Kept]: ...

    async def push_pending_here(self, task_id: str, config_id: str) -> bool: ...

    async def claim_push_dead(self, task_id: str, config_id: str | None = None
                              ) -> Sequence[Kept]: ...

    async def adopt_pushes(self, limit: int) -> Sequence[Kept]: ...

    async def push_dead(self, task_id: str, config_id: str, reason: str, now: float
                        ) -> None: ...

    async def keep_push_config(self, task_id: str, config_id: str, body: str, now: float
                               ) -> None: ...

    async def forget_push_config(self, task_id: str, config_id: str) -> None: ...


def kind_of(body: str) -> str:
    """The kind of a kept body (an A2A config's JSON names none)."""
    try:
        found = json.loads(body).get("kind", A2A)
    except (ValueError, AttributeError):
        return A2A
    return str(found)


@dataclass(slots=True)
class Push:
    """One config: where one task's outcome goes, and of what kind (``kinds`` of the sender
    say how its POST is made)."""

    kind: str
    id: str
    url: str
    body: str  # as kept in the store (the kind's JSON)
    spec: Any = None  # the kind's own reading of it (an A2A config: its protobuf message)


@dataclass
class DeadPush:
    """A notification that was not delivered: what to send again, and why it failed."""

    config: Push
    task: Task
    reason: str
    at: float  # when it was given up (wall clock)
    node: str | None = None  # the cluster node that keeps it (None: a lone coordinator)
    outcome: Task | None = None  # what it told of, when not ``task`` (a chain's end)

    def view(self) -> dict[str, Any]:
        """What an operator sees of it (``reach pushes``)."""
        return {"task_id": self.task.task_id, "config_id": self.config.id,
                "kind": self.config.kind,
                "url": self.config.url[:200], "reason": self.reason, "dead_at": self.at,
                "capability": self.task.envelope.capability, "caller": self.task.envelope.caller,
                "state": (self.outcome or self.task).state.value, "node": self.node}
