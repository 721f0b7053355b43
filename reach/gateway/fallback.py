"""Serving fallbacks: the gateway's side of reach.core.fallback (plans, the last-good cache).

``Fallbacks`` picks a task's plan when it is accepted (the caller's, else its capability's),
keeps the last good result of tasks that may fall back on one, and, when a task would end
dead for a reason that allows it, finishes it with its fallback instead: a static value or a
last good result at once, another capability through normal routing (the caller's
permissions apply; that task has no fallback of its own, so none is ever followed twice).
A result served so says so: ``Task.fallback`` (the result frame's and task view's
``fallback``), a history note, and the capability's ``fallbacks`` metric.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from reach.config import Settings
from reach.core import fallback as fb
from reach.core.agents import AgentRecord
from reach.core.metrics import Metrics
from reach.core.tasks import SubmitRequest, Task, TaskState
from reach.errors import ReachError
from reach.gateway.admission import Admission
from reach.gateway.crew import Crew
from reach.ports import Clock

S = TaskState
#: The ``SubmitRequest.fallback`` of a fallback's own task: it follows no fallback at all,
#: not even the one its capability declares (no loops).
FOLLOWED: dict[str, Any] = {"followed": True}


class Ends(Protocol):
    """What serving a fallback needs of the gateway."""

    def accept(self, request: SubmitRequest) -> Admission: ...

    def outcome(self, task_id: str) -> Any: ...

    def finish(self, task: Task, state: TaskState, *, result: Any = None,
               wire_error: dict[str, Any] | None = None, fall_back: bool = True) -> None: ...


class Fallbacks:
    def __init__(self, settings: Settings, clock: Clock, metrics: Metrics, crew: Crew,
                 gateway: Ends) -> None:
        self.clock = clock
        self.metrics = metrics
        self.crew = crew
        self.gateway = gateway
        self.last_good = fb.LastGood(settings.last_good_entries, settings.last_good_bytes)

    # ------------------------------------------------------------ plans

    def plan(self, request: SubmitRequest, capability: str,
             declaring: Mapping[str, AgentRecord]) -> fb.Plan | None:
        """The plan a new task follows (None: it has none)."""
        if request.fallback is FOLLOWED:
            return None
        declared, scope = self.declared(capability, declaring)
        caller = fb.plan_of(request.fallback)
        if caller is None and declared is None:
            return None
        return fb.choose(caller, declared, scope=scope)

    @staticmethod
    def declared(capability: str, declaring: Mapping[str, AgentRecord]
                 ) -> tuple[fb.Plan | None, str]:
        """The capability's own plan, as its first declaring agent states it, and scope."""
        for record in declaring.values():
            spec = record.capabilities[capability].spec
            return fb.plan_of(spec.fallback), spec.scope
        return None, "read"

    # ------------------------------------------------------------ the last good results

    def remember(self, task: Task, result: Any) -> None:
        """A task succeeded: keep its result when it may be a last good one later."""
        plan = task.envelope.fallback
        if not isinstance(plan, fb.Plan) or plan.kind != fb.LAST_GOOD or task.fallback:
            return
        env = task.envelope
        try:
            size = len(json.dumps(result, ensure_ascii=False))
        except (TypeError, ValueError):  # pragma: no cover - results arrive as JSON
            return
        self.last_good.put(fb.key_of(env.capability, env.params, env.caller, plan.shared),
                           result, size, self.clock.wall())

    # ------------------------------------------------------------ serving

    def serve(self, task: Task, error: dict[str, Any] | None,
              declaring: Mapping[str, AgentRecord]) -> bool:
        """The task would end dead with ``error``: finish it with its fallback instead, or
        start following one (True), or leave it to end dead (False)."""
        env = task.envelope
        plan = env.fallback  # a Plan; None: none chosen (or resumed); False: none ever
        if plan is None:  # a resumed task falls back as its capability declares
            plan, scope = self.declared(env.capability, declaring)
            plan = fb.choose(None, plan, scope=scope)
        why = fb.reason(True, error)
        if not isinstance(plan, fb.Plan) or why is None:
            return False
        if plan.kind == fb.VALUE:
            self._served(task, plan.value, fb.label(plan, why))
            return True
        if plan.kind == fb.LAST_GOOD:
            found = self.last_good.get(fb.key_of(env.capability, env.params, env.caller,
                                                 plan.shared), plan.max_age_s,
                                       self.clock.wall())
            if found is None:
                return False
            self._served(task, found[0], fb.label(plan, why, age_s=found[1]))
            return True
        self.crew.spawn(self._follow(task, plan, why, error),
                        name=f"fallback-{task.task_id}")
        return True

    def _served(self, task: Task, result: Any, label: dict[str, Any]) -> None:
        task.fallback = label
        self.metrics.fell_back(task.envelope.capability)
        self.gateway.finish(task, S.SUCCEEDED, result=result)

    async def _follow(self, task: Task, plan: fb.Plan, why: str,
                      error: dict[str, Any] | None) -> None:
        """Call the other capability for the task, as its caller, within its time left."""
        env = task.envelope
        left = None if env.timeout is None else \
            env.timeout - (self.clock.wall() - env.created_at)
        note = None
        if left is not None and left <= 0:
            note = f"no time left to call {plan.capability!r}"
        else:
            try:
                admission = self.gateway.accept(SubmitRequest(
                    plan.capability, env.params, env.caller, None, env.priority, left, None,
                    env.trace_id, env.parent_task_id, fallback=FOLLOWED,
                    # (it waits its turn as the task it answers for would have)
                    queue_wait=None if env.fail_fast else env.queue_wait,
                    call=env.fail_fast))
            except ReachError as exc:
                note = f"{plan.capability!r} refused it: {exc.code}: {exc}"
            else:
                other = admission.task
                assert other is not None  # no idempotency key: never a duplicate
                outcome = self.gateway.outcome(other.task_id)
                done: Task = other if outcome is None else await outcome
                if done.state is S.SUCCEEDED:
                    self._served(task, done.result,
                                 fb.label(plan, why, task_id=other.task_id))
                    return
                note = f"{plan.capability!r} failed too ({done.state.value})"
        original = dict(error or {})
        original["details"] = {**(original.get("details") or {}), "fallback": note}
        self.gateway.finish(task, S.DEAD, wire_error=original, fall_back=False)
