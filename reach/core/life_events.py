"""What a task's life says and hears (reach.core.life): the commands it returns and the
events that answer its requests. Plain slotted dataclasses, compared by value in tests; not
frozen, since a frozen dataclass's ``__init__`` makes one more call per field on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reach.core import policy
from reach.core.agents import AgentRecord
from reach.core.tasks import Attempt, TaskState
from reach.errors import ReachError, ReachTimeout, Unavailable

# ---------------------------------------------------------------- commands (what to do)


@dataclass(slots=True)
class Move:
    """Move the task to ``state``, noting why (the history note is the stored format)."""

    state: TaskState
    note: str


@dataclass(slots=True)
class Finish:
    """End the task (the gateway may still answer a dead one from its fallback)."""

    state: TaskState
    result: Any = None
    error: ReachError | None = None
    wire_error: dict[str, Any] | None = None


@dataclass(slots=True)
class Update:
    """Write the task's row behind (not waited for): a retry's note and backoff."""


@dataclass(slots=True)
class CountRetry:
    """Count a retry that sends work again (``agent``: the last one tried)."""

    agent: str | None


@dataclass(slots=True)
class CountRejected:
    """Count a task refused for want of a slot."""


@dataclass(slots=True)
class Pick:
    """Request: an agent with a free slot, not in ``exclude`` unless only those are left,
    waiting in the slot queue up to ``until`` (None: the task's ``queue_wait`` from now),
    never past ``deadline``. Answered by ``Picked``, ``NoneFits``, ``Refused`` or
    ``WaitedOut``."""

    exclude: frozenset[str]
    deadline: float | None
    until: float | None = None


@dataclass(slots=True)
class LookFor:
    """Request: how the agent ``agent_id`` is now. Answered by ``AgentIs``."""

    agent_id: str


@dataclass(slots=True)
class Dispatch:
    """Request: one attempt at ``record`` (hedged when the capability hedges). ``kept``: the
    completion timeout a resumed task keeps from before its restart. Answered by ``Ended``."""

    record: AgentRecord
    deadline: float | None
    kept: float | None


@dataclass(slots=True)
class WaitAgents:
    """Request: wait up to ``seconds`` for the agents to change. Answered by ``Woke``."""

    seconds: float


@dataclass(slots=True)
class Sleep:
    """Request: wait ``seconds`` (a retry's backoff). Answered by ``Woke``."""

    seconds: float


@dataclass(slots=True)
class Charge:
    """Request: spend one retry from the coordinator-wide budget. Answered by ``Budget``."""


Command = (Move | Finish | Update | CountRetry | CountRejected | Pick | LookFor | Dispatch
           | WaitAgents | Sleep | Charge)


# ---------------------------------------------------------------- events (what happened)


@dataclass(slots=True)
class Picked:
    """An agent was picked (a slot of it is the task's once dispatched)."""

    record: AgentRecord


@dataclass(slots=True)
class NoneFits:
    """No agent can take the task now. ``breaker_wait``: how long until a resting breaker
    lets work through (``policy.breaker_wait``), ``probing``: that wait is for a half-open
    probe already out (not spent from the task's allowance)."""

    error: Unavailable
    breaker_wait: float | None = None
    probing: bool = False


@dataclass(slots=True)
class Refused:
    """Every agent is saturated and the task could not wait, or it was shed (``Rejected``);
    or the agents declaring the capability now refuse the task itself (its params, its
    caller's scope): it fails."""

    error: ReachError


@dataclass(slots=True)
class WaitedOut:
    """A submitted task's wait in the backlog for a free slot is over (its deadline, or
    ``max_wait``): it ends dead, a dead letter to replay, not refused after acceptance."""

    error: ReachTimeout


@dataclass(slots=True)
class AgentIs:
    """The agent asked about: ``found`` (None: not registered), ``ready`` (reachable, serving
    the capability, a slot free), ``idempotent`` (some agent declares the capability so)."""

    found: AgentRecord | None
    ready: bool
    idempotent: bool


@dataclass(slots=True)
class Ended:
    """An attempt ended. ``idempotent``: as its agent declares the capability;
    ``others_left``: a healthy untried candidate remains (read only for an attempt that was
    never delivered)."""

    verdict: policy.Verdict
    payload: Any
    attempt: Attempt
    record: AgentRecord
    idempotent: bool
    others_left: bool


@dataclass(slots=True)
class Woke:
    """A wait (``WaitAgents``, ``Sleep``) is over."""


@dataclass(slots=True)
class Budget:
    """The retry budget's answer to ``Charge``."""

    ok: bool


Event = Picked | NoneFits | Refused | WaitedOut | AgentIs | Ended | Woke | Budget

#: The commands that ask for an answer (the next event); the others need none.
REQUESTS = frozenset({Pick, LookFor, Dispatch, WaitAgents, Sleep, Charge})
