"""One attempt at one agent, and hedged reads: deliver, time, judge and record an attempt.

The gateway decides *whether* and *where* to try (``Gateway._drive``); a ``Dispatcher`` carries
one try out: it commits which agent holds the key, sends the invoke, waits under the ack and
completion timers (``Delivery``), and records the outcome in the attempt, the agent's breaker,
the latency windows that set future timeouts, and the metrics. ``run`` adds hedging: for an
idempotent read still running past its capability's P95, a second copy at another agent, first
answer wins, the loser is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from reach.config import Settings
from reach.core.metrics import Metrics
from reach.core.registry import AgentRecord, Registry
from reach.core.resilience import BreakerState, LatencyWindow, RetryBudget, completion_timeout
from reach.core.routing import Router, Saturated
from reach.core.tasks import Attempt, Task, TaskState
from reach.errors import Unavailable
from reach.gateway.delivery import Delivery
from reach.store.store import Store
from reach.wire.protocol import encode

S = TaskState
HEALTH_WINDOW = 50
log = logging.getLogger("reach.dispatch")


class Dispatcher:
    """Carries out attempts for a gateway; the callbacks are the gateway's own bookkeeping."""

    def __init__(self, settings: Settings, registry: Registry, router: Router, store: Store,
                 clock: Callable[[], float], metrics: Metrics, budget: RetryBudget, *,
                 move: Callable[[Task, TaskState, str], None],
                 breaker_moved: Callable[[AgentRecord, BreakerState], None],
                 slot_freed: Callable[[AgentRecord], None],
                 emit_chunk: Callable[[str, int, Any], None],
                 answered: Callable[[Task, Any], None] | None = None) -> None:
        self.settings = settings
        self.registry = registry
        self.router = router
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.budget = budget
        self.move = move
        self.breaker_moved = breaker_moved
        self.slot_freed = slot_freed
        self.emit_chunk = emit_chunk
        self.answered = answered
        self.latency: dict[str, LatencyWindow] = {}  # capability → recent successes
        # capability → its last attempts across all agents (True: not a fault); tells a
        # capability that is failing as a whole from agents whose breakers tripped on noise
        self.health: dict[str, deque[bool]] = {}
        self.observed: dict[str, float] = {}  # agent id → smoothed latency (s)

    async def attempt(self, task: Task, record: AgentRecord,
                       deadline: float | None) -> tuple[str, Any, Attempt]:
        env = task.envelope
        loop = asyncio.get_running_loop()
        now = self.clock()
        cap = record.capabilities[env.capability]
        window = self.latency.setdefault(env.capability, LatencyWindow())
        # The caller's deadline, when given, overrides the adaptive completion timeout.
        left = None if deadline is None else max(0.0, deadline - loop.time())
        completion = completion_timeout(cap.spec.latency_ms, window, left)
        # A caller's deadline shorter than the agent's own timeout is not the agent's fault.
        caller_bound = left is not None and left < completion_timeout(
            cap.spec.latency_ms, window, None)
        attempt = Attempt(number=len(task.attempts) + 1, agent_id=record.agent_id,
                          agent=record.name, started_at=now, instance=record.instance)
        task.attempts.append(attempt)
        self.move(task, S.DISPATCHED, f"attempt {attempt.number} to {record.name}")
        tid = env.task_id
        delivery = Delivery(loop, self.settings.ack_timeout, completion,
                            lambda seq, data: self.emit_chunk(tid, seq, data),
                            lambda: self._acknowledged(task),
                            lambda result: self._answer(task, attempt, result))
        record.inflight += 1
        record.calls += 1
        before = record.breaker.state
        record.breaker.on_dispatch(now)
        self.breaker_moved(record, before)
        self.metrics.dispatched(env.capability, record.name)
        started = loop.time()
        finished = False
        try:
            # Which agent holds the key is committed before the work leaves (for a first
            # attempt, by the submit's own commit): after a crash the task goes back to that
            # agent, whose cache knows the key, and is never run a second time elsewhere.
            await self.store.persist(task)
            # The agent may have started draining or gone while the commit was written.
            session = record.session if not record.draining else None
            invoke = encode(
                "invoke", task_id=env.task_id, attempt=attempt.number,
                capability=env.capability, params=env.params,
                idempotency_key=env.idempotency_key, trace_id=env.trace_id,
                parent_task_id=env.parent_task_id, traceparent=env.traceparent,
                deadline_ms=None if left is None else left * 1000, caller=env.caller)
            if session is None or not session.deliver(tid, attempt.number, delivery, invoke):
                delivery.resolve("lost")
            kind, payload = await delivery.fut
            if kind == "lost" and not delivery.acked:
                kind = "undelivered"
            elif kind == "error" and (payload or {}).get("code") == "unavailable":
                kind = "undelivered"  # the agent refused it before running it (shutting down)
            finished = True
        finally:
            record.inflight -= 1
            if record.session is not None:
                record.session.forget(env.task_id, attempt.number)
            if not finished:  # cancelled (stop, a hedge lost) or the store failed: not judged
                delivery.resolve("lost")
                record.breaker.probing = False
                self.metrics.ended(env.capability, record.name, "cancelled", 0.0)
            self.slot_freed(record)
        ended = self.clock()
        if attempt.ended_at is None:  # else set when it answered (_answer)
            attempt.ended_at = ended
        answer = kind == "error" and bool((payload or {}).get("details", {}).get("answer"))
        attempt.outcome = ("ok" if kind == "ok" else "answer" if answer
                           else "fault" if kind == "error" else kind)
        took = loop.time() - started
        caller_deadline = kind == "timeout" and caller_bound
        self.metrics.ended(env.capability, record.name,
                           "caller_deadline" if caller_deadline else attempt.outcome, took)
        if kind == "ok":
            window.add(took)
            prev = self.observed.get(record.agent_id)
            self.observed[record.agent_id] = took if prev is None else 0.8 * prev + 0.2 * took
        elif caller_deadline:
            attempt.error = "the caller's deadline passed"
            record.breaker.probing = False  # neither success nor fault for the breaker
            return kind, payload, attempt
        elif not answer:
            record.faults += 1
            attempt.error = (str((payload or {}).get("message")) if kind == "error"
                             else {"timeout": "completion timeout",
                                   "undelivered": "not acknowledged",
                                   "lost": "connection lost"}.get(kind, kind))
        before = record.breaker.state
        record.breaker.record(kind == "ok" or answer, ended)
        self.breaker_moved(record, before)
        health = self.health.get(env.capability)
        if health is None:
            health = self.health[env.capability] = deque(maxlen=HEALTH_WINDOW)
        health.append(kind == "ok" or answer)
        return kind, payload, attempt

    def _answer(self, task: Task, attempt: Attempt, result: Any) -> None:
        """A result arrived: record it, and let the gateway answer the caller now, before
        this attempt's bookkeeping (which ``attempt`` does once it resumes). A hedge still
        running elsewhere has lost; it is marked so at once and cancelled by ``run``."""
        if self.answered is None or task.terminal:
            return
        now = self.clock()
        attempt.outcome, attempt.ended_at = "ok", now
        for other in task.attempts:
            if other.outcome == "running":
                other.outcome, other.ended_at, other.error = "cancelled", now, "hedge lost"
        try:
            self.answered(task, result)
        except Exception:  # runs in an agent session's reader: a bug must not end it
            log.exception("answering task %s failed; its driver finishes it", task.task_id)

    def mostly_healthy(self, capability: str) -> bool:
        """Did most of the capability's recent attempts, at any agent, work?"""
        health = self.health.get(capability)
        return health is not None and len(health) > 0 and sum(health) * 2 >= len(health)

    def _acknowledged(self, task: Task) -> None:
        # With a hedge in flight, the second agent's ack finds the task already running.
        if task.state is S.DISPATCHED:
            self.move(task, S.RUNNING, "acknowledged")

    # ------------------------------------------------------------ hedged reads

    async def run(self, task: Task, record: AgentRecord, deadline: float | None
                   ) -> tuple[str, Any, Attempt, AgentRecord]:
        """One attempt at ``record``; for a hedged idempotent read still running past the
        capability's P95, a second attempt at another agent, and the first answer wins (the
        other is cancelled). A hedge spends the retry budget like a retry."""
        after = self._hedge_after(task, record)
        if after is None:
            kind, payload, attempt = await self.attempt(task, record, deadline)
            return kind, payload, attempt, record
        loop = asyncio.get_running_loop()
        first = loop.create_task(self.attempt(task, record, deadline))
        pending: dict[asyncio.Task[tuple[str, Any, Attempt]], AgentRecord] = {first: record}
        try:
            done, _ = await asyncio.wait({first}, timeout=after)
            if not done:
                other = self._hedge_target(task, record)
                if other is not None and self.budget.spend(self.clock()):
                    self.metrics.retried(task.envelope.capability, None)
                    pending[loop.create_task(self.attempt(task, other, deadline))] = other
            while True:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    rec = pending.pop(fut)
                    kind, payload, attempt = fut.result()
                    if attempt.outcome in ("ok", "answer") or not pending:
                        return kind, payload, attempt, rec
                    # this one failed: the other may still answer
        finally:
            for fut in pending:
                fut.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
                now = self.clock()
                for att in task.attempts:
                    if att.outcome == "running":
                        att.outcome, att.ended_at, att.error = "cancelled", now, "hedge lost"

    def _hedge_after(self, task: Task, record: AgentRecord) -> float | None:
        env = task.envelope
        cap = record.capabilities.get(env.capability)
        if cap is None or not cap.spec.idempotent:
            return None
        if not (cap.spec.hedge if env.hedge is None else env.hedge):
            return None
        window = self.latency.get(env.capability)
        return None if window is None else window.p95()

    def _hedge_target(self, task: Task, record: AgentRecord) -> AgentRecord | None:
        env = task.envelope
        try:
            return self.router.pick(env.capability, env.params, env.caller,
                                    self.registry.declaring(env.capability), self.clock(),
                                    frozenset({record.agent_id}), self.observed)
        except (Unavailable, Saturated):
            return None
