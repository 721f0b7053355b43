"""The audit trail: who called what, with which scope, what the coordinator decided, how it ended.

``Audit`` turns the gateway's decisions into plain records and hands each to a ``sink`` (the
edge's writer, reach.server.audit, which puts them on a bounded queue for a thread to write
as JSON lines: nothing here touches a file). Three kinds of record:

    call   one per submit decision: accepted, duplicate, or the refusal's error code
           (no_route, unauthorized, invalid_params, rejected, unavailable, ...)
    end    one per task that ends: its final state, the agent that served it, attempts
    admin  one per operator action (replay, drain, reset_breaker, ...), principal "admin"
    forward  one per attempt a peer node forwards here: the peer, its caller, the decision

Params, intents and results are left out unless ``include_params`` is set (then params and
intent text are recorded, never results); refusal messages are left out too, since a schema
error may quote a param's value. ``time`` is the clock's wall time in seconds (the writer
prints it in ISO 8601). With no ``Audit`` on the gateway nothing is built at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reach.core import names
from reach.core.registry import Registry
from reach.core.tasks import SubmitRequest, Task
from reach.errors import ReachError
from reach.gateway.admission import Admission
from reach.ports import Clock

Sink = Callable[[dict[str, Any]], None]
ADMIN_PRINCIPAL = "admin"  # who an admin-token holder is (the admin token names nobody else)


class Audit:
    """Builds audit records and hands them to ``sink``; see the module docstring."""

    def __init__(self, clock: Clock, sink: Sink, registry: Registry, *,
                 include_params: bool = False) -> None:
        self.clock = clock
        self.sink = sink
        self.registry = registry
        self.include_params = include_params

    def _scope(self, capability: str) -> str | None:
        """The scope the capability is declared with (``read,write`` when agents differ)."""
        declared = self.registry.index.get(capability)
        if not declared:
            return None
        return ",".join(sorted({g.scope for g in declared.groups.values()})) or None

    def _call(self, request: SubmitRequest, capability: str, decision: str,
              task_id: str | None, trace_id: str | None) -> None:
        record: dict[str, Any] = {
            "time": self.clock.wall(), "event": "call", "caller": request.caller,
            "capability": capability, "scope": self._scope(capability) if capability else None,
            "task_id": task_id, "trace_id": trace_id, "decision": decision}
        if request.intent is not None and not request.capability:
            record["by_intent"] = True
        if request.tags:
            record["tags"] = dict(request.tags)
        if self.include_params:
            record["params"] = request.params
            if request.intent is not None:
                record["intent"] = request.intent
        self.sink(record)

    # ------------------------------------------------------------ gateway hooks

    def admitted(self, request: SubmitRequest, admission: Admission) -> None:
        """``Gateway.accept`` took the submit: a new task, or a duplicate of an earlier one."""
        task = admission.task
        capability = task.envelope.capability if task is not None else _name(request)
        self._call(request, capability, "duplicate" if admission.duplicate else "accepted",
                   task.task_id if task is not None else admission.lookup,
                   task.envelope.trace_id if task is not None else None)

    def refused(self, request: SubmitRequest, error: ReachError) -> None:
        """``Gateway.accept`` refused the submit with ``error`` (nothing was stored)."""
        self._call(request, _name(request), error.code, None, None)

    def ended(self, task: Task, state: str | None = None) -> None:
        """A task reached its final state (``state`` overrides it: ``not_stored``)."""
        env = task.envelope
        last = task.attempts[-1] if task.attempts else None
        record: dict[str, Any] = {
            "time": self.clock.wall(), "event": "end", "caller": env.caller,
            "capability": env.capability, "task_id": env.task_id, "trace_id": env.trace_id,
            "state": state or task.state.value, "agent": None if last is None else last.agent,
            "attempts": len(task.attempts)}
        if task.error is not None:
            record["error"] = task.error.get("code")
        self.sink(record)

    def forwarded(self, node: str, caller: str, capability: str, task_id: str,
                  trace_id: str, attempt: int, agent: str | None, decision: str,
                  params: dict[str, Any] | None = None) -> None:
        """A peer ``node`` forwarded an attempt here for ``caller`` (the holder's side of a
        peer link, reach.server.peer_session): ``decision`` is ``accepted`` or the refusal's
        code. The task is the peer's, so its ``call`` and ``end`` lines are on that node."""
        record: dict[str, Any] = {
            "time": self.clock.wall(), "event": "forward", "node": node, "caller": caller,
            "capability": capability, "scope": self._scope(capability), "task_id": task_id,
            "trace_id": trace_id, "attempt": attempt, "agent": agent, "decision": decision}
        if self.include_params and params is not None:
            record["params"] = params
        self.sink(record)

    def admin(self, action: str, args: dict[str, Any], ok: bool) -> None:
        """An operator's action (admin feed or dashboard), as ``Ops.record`` sees it."""
        self.sink({"time": self.clock.wall(), "event": "admin", "principal": ADMIN_PRINCIPAL,
                   "action": action, "args": args, "ok": ok})


def _name(request: SubmitRequest) -> str:
    """The capability as the gateway would call it ("" when not named, or not a name)."""
    try:
        return names.normalize(request.capability) if request.capability else ""
    except ValueError:
        return request.capability
