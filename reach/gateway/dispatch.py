"""One attempt at one agent, and hedged reads: deliver, time, judge and record an attempt.

The driver (reach.gateway.driver) decides *whether* and *where* to try; a ``Dispatcher``
carries one try out: it commits which agent holds the key, hands the work to the agent's
``ports.AgentLink``, waits under the ack and completion timers (``Delivery``), asks the policy
(reach.core.policy) what the end means, and records it in the attempt, the agent's breaker,
the latency windows that set future timeouts, and the metrics. ``run`` adds hedging: for an
idempotent read still running past its capability's P95, a second copy at another agent,
first answer wins, the loser is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from reach.config import Settings
from reach.core import keys, policy, results
from reach.core.agents import AgentRecord
from reach.core.metrics import Metrics
from reach.core.registry import Registry
from reach.core.resilience import (
    BreakerState,
    LatencyWindow,
    RetryBudget,
    TimeoutRule,
    completion_timeout,
)
from reach.core.routing import Router, Saturated
from reach.core.schemas import Validator
from reach.core.tasks import Attempt, Outcome, Task, TaskState
from reach.errors import Unavailable
from reach.gateway.clock import within
from reach.gateway.deadlines import Deadlines
from reach.gateway.delivery import Delivery
from reach.ports import AgentLink, Clock, TaskStore, Work

S = TaskState
HEALTH_WINDOW = 50
# Attempt outcomes are kept as plain strings: serializing an enum member (the store writes
# every attempt on each commit) asks for its ``.value``, a descriptor call each time.
OK, CANCELLED = Outcome.OK.value, Outcome.CANCELLED.value
log = logging.getLogger("reach.dispatch")


class Bookkeeper(Protocol):
    """What a dispatcher tells the gateway as an attempt goes (the gateway implements it)."""

    def move(self, task: Task, state: TaskState, note: str = "") -> None: ...

    def breaker_moved(self, record: AgentRecord, before: BreakerState) -> None: ...

    def slot_freed(self, record: AgentRecord) -> None: ...

    def emit_chunk(self, task_id: str, seq: int, data: Any) -> None: ...

    def answered(self, task: Task, result: Any) -> None: ...


Ended = tuple[policy.Verdict, Any, Attempt]


@dataclass(slots=True)
class Try:
    """One attempt being carried out (``Dispatcher.open`` to ``close`` or ``abandon``)."""

    task: Task
    record: AgentRecord
    attempt: Attempt
    delivery: Delivery
    window: LatencyWindow
    caller_bound: bool
    bad: list[dict[str, Any]]  # a result that broke the capability's ``returns`` schema
    left: float | None  # what was left of the caller's deadline when it started (s)
    started: float
    link: AgentLink | None = None


class Dispatcher:
    """Carries out attempts for a gateway, through each agent's ``AgentLink``."""

    def __init__(self, settings: Settings, registry: Registry, router: Router,
                 store: TaskStore, clock: Clock, metrics: Metrics, budget: RetryBudget,
                 book: Bookkeeper) -> None:
        self.settings = settings
        self.registry = registry
        self.router = router
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.budget = budget
        self.book = book
        self.latency: dict[str, LatencyWindow] = {}  # capability → recent successes
        # capability → its last attempts across all agents (True: not a fault); tells a
        # capability that is failing as a whole from agents whose breakers tripped on noise
        self.health: dict[str, deque[bool]] = {}
        self.observed: dict[str, float] = {}  # agent id → smoothed latency (s)
        # told of every judged attempt's time (the gateway's probes: a slow call → a probe)
        self.call_ended: Callable[[AgentRecord, float | None, float, bool], None] | None = None
        self.timeouts = TimeoutRule(settings.default_timeout, settings.timeout_floor,
                                    settings.timeout_samples)
        self.deadlines = Deadlines(clock)  # every attempt's ack and completion deadlines
        # task id → its idempotent attempts that timed out, each with its link: told to stop
        # once the task has ended (``stop_timed_out``), not at the timeout (see ``close``)
        self.timed_out: dict[str, list[tuple[AgentLink, int]]] = {}

    async def attempt(self, task: Task, record: AgentRecord, deadline: float | None,
                      kept: float | None = None) -> Ended:
        """One attempt at ``record``. ``kept``: the completion timeout a resumed task without
        a deadline keeps from before the restart (None: worked out now)."""
        t = self.open(task, record, deadline, kept)
        try:
            # Which agent holds the key is committed before the work leaves (for a first
            # attempt, by the submit's own commit): after a crash the task goes back to that
            # agent, whose cache knows the key, and is never run a second time elsewhere.
            await self.store.persist(task)
            self.send(t)
            kind, payload = await t.delivery.fut
        except BaseException:  # cancelled (stop, a hedge lost) or the store failed
            self.abandon(t)
            raise
        return self.close(t, kind, payload)

    def open(self, task: Task, record: AgentRecord, deadline: float | None,
             kept: float | None) -> Try:
        """Record an attempt at ``record`` and take its slot; the caller commits it
        (``store.persist``), then ``send``s it, then ``close``s it with how it ended, or
        ``abandon``s it."""
        env = task.envelope
        clock, book = self.clock, self.book
        now = clock.wall()
        cap = record.capabilities[env.capability]
        window = self.latency.setdefault(env.capability, LatencyWindow())
        # The caller's deadline, when given, overrides the adaptive completion timeout.
        left = None if deadline is None else max(0.0, deadline - clock.now())
        completion = completion_timeout(cap.spec.latency_ms, window, left, self.timeouts) \
            if kept is None else kept
        # (The capability's own timeout is only worked out when the caller gave a deadline.)
        caller_bound = left is not None and policy.caller_bound(
            left, completion_timeout(cap.spec.latency_ms, window, None, self.timeouts))
        attempt = Attempt(number=len(task.attempts) + 1, agent_id=record.agent_id,
                          agent=record.name, started_at=now, instance=record.instance,
                          timeout=completion)
        task.attempts.append(attempt)
        book.move(task, S.DISPATCHED, f"attempt {attempt.number} to {record.name}" if
                  record.node is None else  # held by a peer coordinator (reach.cluster)
                  f"attempt {attempt.number} to {record.name} at node {record.node}")
        tid = env.task_id
        # A declared result schema is checked before the caller is answered; a result that
        # breaks it is held here and judged as the agent's fault below (reach.core.results).
        returns = cap.returns
        bad: list[dict[str, Any]] = []
        delivery = Delivery(
            clock, self.settings.ack_timeout, completion,
            lambda seq, data: book.emit_chunk(tid, seq, data), lambda: self._acknowledged(task),
            (lambda result: self._answer(task, attempt, result)) if returns is None else
            (lambda result: self._checked(task, attempt, record, returns, result, bad)),
            idempotent=cap.spec.idempotent, limit=deadline, timers=self.deadlines)
        record.take(env.capability)  # a slot of the agent and of the capability's bulkhead
        record.calls += 1
        before = record.breaker.state
        record.breaker.on_dispatch(now)
        book.breaker_moved(record, before)
        self.metrics.dispatched(env.capability, record.name)
        return Try(task, record, attempt, delivery, window, caller_bound, bad, left,
                   clock.now())

    def send(self, t: Try) -> None:
        """Hand the committed attempt to its agent's link."""
        record, env = t.record, t.task.envelope
        # The agent may have started draining or gone while the commit was written.
        t.link = link = record.link if not record.draining else None
        attempt, left = t.attempt, t.left
        work = Work(env.task_id, attempt.number, env.capability, env.params,
                    env.idempotency_key if not env.revision else
                    keys.revised(env.idempotency_key, env.revision),
                    env.trace_id, env.caller, env.parent_task_id, env.traceparent,
                    None if left is None else left * 1000)
        if link is None or not link.deliver(work, t.delivery):
            t.delivery.resolve("unsent")  # proof it never reached the agent

    def _release(self, t: Try, tell: bool = True) -> None:
        record = t.record
        record.give(t.task.envelope.capability)
        if t.link is not None:
            t.link.cancel(t.task.task_id, t.attempt.number, tell=tell)

    def abandon(self, t: Try) -> None:
        """The attempt ends unjudged: a hedge lost, the task was cancelled, its commit failed,
        or the coordinator stopped or let the task go. Its slot is given back. The agent is
        told to stop only work given up for good (a hedge lost, a cancelled task): a stopped
        or let-go task resumes and goes back to the agent whose key cache knows it, which a
        cancelled run would have forgotten (it would run a second time)."""
        self._release(t, t.attempt.outcome == CANCELLED or t.task.state is S.CANCELLED)
        t.delivery.resolve("lost")
        t.record.breaker.probing = False
        self.metrics.ended(t.task.envelope.capability, t.record.name,
                           Outcome.CANCELLED.value, 0.0)
        self.book.slot_freed(t.record)

    def stop_timed_out(self, task_id: str) -> None:
        """The task ended: tell the agents of its idempotent attempts that timed out, and may
        still run, to stop (one whose run was joined by a retry, or answered, ignores it)."""
        for link, number in self.timed_out.pop(task_id, ()):
            link.cancel(task_id, number, tell=True)

    def forget_timed_out(self, task_id: str) -> None:
        """Another node owns the task now: forget its timed-out attempts without telling their
        agents (the new owner's retry may join such a run through the agent's key cache)."""
        self.timed_out.pop(task_id, None)

    def close(self, t: Try, kind: str, payload: Any) -> Ended:
        """The attempt ended as its link reported (``kind``, ``payload``): judge it and
        record it."""
        if t.bad:
            kind, payload = "error", t.bad[0]
        record = t.record
        # A completion timeout does not stop the run at once: an idempotent task's retry at
        # this agent joins it (its key cache), and a write that outlives its timeout is left
        # to finish rather than cut in half. An idempotent one is stopped once the task ends.
        timeout = kind == "timeout"
        self._release(t, not timeout)
        if timeout and t.link is not None and \
                record.capabilities[t.task.envelope.capability].spec.idempotent:
            self.timed_out.setdefault(t.task.task_id, []).append((t.link, t.attempt.number))
        self.book.slot_freed(record)
        verdict = policy.classify(kind, payload, acked=t.delivery.flight.acked,
                                  caller_bound=t.caller_bound)
        if verdict.full:  # its holder node had no slot: full here too until it reports room
            self.registry.holder_full(record, True)
        self._record(t.task, record, t.attempt, verdict, self.clock.now() - t.started,
                     t.window)
        return verdict, payload, t.attempt

    def _record(self, task: Task, record: AgentRecord, attempt: Attempt,
                verdict: policy.Verdict, took: float, window: LatencyWindow) -> None:
        """Write one attempt's end into the attempt, breaker, windows and metrics. What only
        a feature in use reads is skipped otherwise: the probes' slow-call hook for an agent
        nobody probes, the smoothed latency without the lowest-latency strategy, the
        breaker's announcement when it did not move."""
        cap = task.envelope.capability
        ended = self.clock.wall()
        if attempt.ended_at is None:  # else set when it answered (_answer)
            attempt.ended_at = ended
        attempt.outcome = name = verdict.name  # stored as its plain value (see Attempt)
        judged = verdict.judged
        self.metrics.ended(cap, record.name, name if judged else "caller_deadline", took)
        if judged and record.probe is not None and self.call_ended is not None:
            self.call_ended(record, record.capabilities[cap].spec.latency_ms, took,
                            verdict.outcome is Outcome.TIMEOUT)
        healthy = verdict.healthy
        breaker = record.breaker
        if verdict.outcome is Outcome.OK:
            window.add(took)
            if self.router.strategy == "lowest_latency":  # the only reader of ``observed``
                self.observed[record.agent_id] = policy.smoothed(
                    self.observed.get(record.agent_id), took)
        elif not judged:
            attempt.error = verdict.error
            breaker.probing = False  # neither success nor fault for the breaker
            return
        elif not healthy:
            record.faults += 1
            attempt.error = verdict.error
        before = breaker.state
        moved = breaker.record(healthy, ended) is not before
        record.outcome(cap, healthy, ended)  # the 7-day record routing weighs
        if moved:
            self.book.breaker_moved(record, before)
        health = self.health.get(cap)
        if health is None:
            health = self.health[cap] = deque(maxlen=HEALTH_WINDOW)
        health.append(healthy)

    def _answer(self, task: Task, attempt: Attempt, result: Any) -> None:
        """A result arrived: record it, and let the gateway answer the caller now, before
        this attempt's bookkeeping (which ``attempt`` does once it resumes). A hedge still
        running elsewhere has lost; it is marked so at once and cancelled by ``run``."""
        if task.terminal:
            return
        now = self.clock.wall()
        attempt.outcome, attempt.ended_at = OK, now
        _cancel_running(task, now)
        try:
            self.book.answered(task, result)
        except Exception:  # runs in an agent link's reader: a bug must not end it
            log.exception("answering task %s failed; its driver finishes it", task.task_id)

    def _checked(self, task: Task, attempt: Attempt, record: AgentRecord,
                 returns: Validator | None, result: Any, bad: list[dict[str, Any]]) -> None:
        """``_answer`` for a capability with a ``returns`` schema: a result that fits is the
        answer; one that breaks it is kept in ``bad`` (the attempt then ends as a fault)."""
        error = results.bad_result(returns, result, capability=task.envelope.capability,
                                   agent=record.name, version=record.version)
        if error is None:
            self._answer(task, attempt, result)
        else:
            bad.append(error)

    def mostly_healthy(self, capability: str) -> bool:
        return policy.mostly_healthy(self.health.get(capability, ()))

    def _acknowledged(self, task: Task) -> None:
        # With a hedge in flight, the second agent's ack finds the task already running.
        if task.state is S.DISPATCHED:
            self.book.move(task, S.RUNNING, "acknowledged")

    # ------------------------------------------------------------ hedged reads

    async def run(self, task: Task, record: AgentRecord, deadline: float | None,
                  kept: float | None = None
                  ) -> tuple[policy.Verdict, Any, Attempt, AgentRecord]:
        """One attempt at ``record``; for a hedged idempotent read still running past the
        capability's P95, a second attempt at another agent, and the first answer wins (the
        other is cancelled). A hedge spends the retry budget like a retry. ``kept``: as for
        ``attempt``."""
        after = self.hedge_after(task, record)
        if after is None:
            verdict, payload, attempt = await self.attempt(task, record, deadline, kept)
            return verdict, payload, attempt, record
        loop = asyncio.get_running_loop()
        first = loop.create_task(self.attempt(task, record, deadline, kept))
        pending: dict[asyncio.Task[Ended], AgentRecord] = {first: record}
        try:
            # (a task answered in the agent session's own step is over before ``first``, its
            # bookkeeping, is: no hedge goes out for it, nor is one counted)
            if not await within(self.clock, first, after) and not task.terminal:
                other = self._hedge_target(task, record)
                if other is not None and self.budget.spend(self.clock.wall()):
                    self.metrics.retried(task.envelope.capability, None)
                    pending[loop.create_task(self.attempt(task, other, deadline, kept))] = other
            while True:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    rec = pending.pop(fut)
                    verdict, payload, attempt = fut.result()
                    if verdict.finished or not pending:
                        return verdict, payload, attempt, rec
                    # this one failed: the other may still answer
        finally:
            for fut in pending:
                fut.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
                _cancel_running(task, self.clock.wall())

    def hedge_after(self, task: Task, record: AgentRecord) -> float | None:
        """When to send a hedge of this attempt (None: never)."""
        env = task.envelope
        cap = record.capabilities.get(env.capability)
        if cap is None or not policy.hedges(idempotent=cap.spec.idempotent,
                                            declared=cap.spec.hedge, requested=env.hedge):
            return None  # most calls: no window read at all
        window = self.latency.get(env.capability)
        return None if window is None else window.p95()

    def _hedge_target(self, task: Task, record: AgentRecord) -> AgentRecord | None:
        env = task.envelope
        try:
            return self.router.pick(env.capability, env.params, env.caller,
                                    self.registry.declaring(env.capability), self.clock.wall(),
                                    frozenset({record.agent_id}), self.observed, env.tags,
                                    env.priority)
        except (Unavailable, Saturated):
            return None


def _cancel_running(task: Task, now: float) -> None:
    """Mark the task's attempts still running as hedges that lost."""
    for other in task.attempts:
        if other.outcome == Outcome.RUNNING:
            other.outcome, other.ended_at, other.error = CANCELLED, now, "hedge lost"

