"""The gateway: accepts tasks durably, routes them, delivers them, and sees each one to an end.

``accept`` checks and records a task and starts its ``Driver`` (reach.gateway.driver); the
``Dispatcher`` carries out attempts through each agent's ``ports.AgentLink``; the ``TaskBook``
keeps what is known of every task and who waits on it. No sockets and no SQL: tasks are kept
through ``ports.TaskStore``, time is ``ports.Clock`` (a ``ManualClock`` in unit tests).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Callable
from typing import Any

from reach.config import Settings
from reach.core import names, traces
from reach.core import tags as tagging
from reach.core.agents import AgentRecord
from reach.core.intent_learn import Phrase
from reach.core.keys import scoped_key
from reach.core.life import RESUMED
from reach.core.metrics import Metrics
from reach.core.registry import Registry
from reach.core.resilience import BreakerState, RetryBudget
from reach.core.routing import Router
from reach.core.tasks import Envelope, Outcome, SubmitRequest, Task, TaskState, new_task
from reach.errors import InvalidParams, ReachError, Rejected, Unavailable
from reach.gateway import admission, cancelling
from reach.gateway.admission import Admission
from reach.gateway.audit import Audit
from reach.gateway.book import ChunkSink, TaskBook, replay_note
from reach.gateway.book_views import BookViews
from reach.gateway.chaining import Chains
from reach.gateway.crew import Crew
from reach.gateway.dispatch import Dispatcher
from reach.gateway.driver import Driver
from reach.gateway.events import BREAKER, TASK, EventBus
from reach.gateway.fallback import FOLLOWED, Fallbacks
from reach.gateway.follow import Following
from reach.gateway.probing import Probes
from reach.gateway.slots import SlotQueue
from reach.ports import Clock, DuplicateKey, TaskStore

S = TaskState
log = logging.getLogger("reach.gateway")


class Gateway(BookViews):
    def __init__(self, settings: Settings, registry: Registry, router: Router,
                 store: TaskStore, clock: Clock, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.registry = registry
        self.router = router
        self.store = store
        self.clock = clock
        self.rng = rng or random.Random()
        self.known: dict[str, set[str]] = {}  # capability → agents that ever declared it
        self.submitters = admission.Submitters()
        self.events = EventBus(clock)
        self.metrics = Metrics()
        self.book = TaskBook(settings, self.events)
        self.then = self.book.then  # call back once an admission's commit is done
        self.remember_key, self.prune_keys = self.book.remember_key, self.book.prune_keys
        self.prune_dead = self.book.prune_dead
        self.slots = SlotQueue(settings.priority_aging, clock)
        self.budget = RetryBudget(settings.retry_budget, settings.retry_budget_min,
                                  settings.retry_budget_window)
        self.dispatch = Dispatcher(settings, registry, router, store, clock, self.metrics,
                                   self.budget, self)
        # active probes (the loop is the coordinator's; links report answers here)
        self.probes = Probes(settings, registry, clock, self.events)
        self.dispatch.call_ended = self.probes.call_ended
        self._drivers = Crew()
        self.driver = Driver(settings, registry, router, store, clock, self.rng, self.book,
                             self.slots, self.dispatch, self.metrics, self.budget, self,
                             self._drivers)
        self.following = Following(store, self.book, clock, self._drivers, enabled=settings.cluster)
        self.following.on_let_go = self.dispatch.forget_timed_out
        self.fallbacks = Fallbacks(settings, clock, self.metrics, self._drivers, self)
        self.chains = Chains(self)  # result chains (``then``): reach.gateway.chaining
        self.accepting = True
        self.audit: Audit | None = None  # set by the wiring when an audit log is kept
        self.on_learned: Callable[[Phrase], None] | None = None  # the wiring keeps phrases
        self.on_replay: Callable[[Task], None] | None = None  # the wiring re-arms webhooks
        registry.listen(self.agents_changed)

    async def submit(self, request: SubmitRequest) -> tuple[Task, bool]:
        """Accept a task and return once it is committed: (task, duplicate)."""
        admission = self.accept(request)
        task = admission.task or await self.first_of(
            admission.lookup or "", request.capability, request.idempotency_key)
        if admission.commit is not None:
            try:
                await asyncio.shield(admission.commit)
            except DuplicateKey as dup:  # another node holds the key: answer with its task
                return await self.first_of(dup.first_task_id, request.capability,
                                           request.idempotency_key), True
        return task, admission.duplicate

    async def first_of(self, task_id: str, capability: str, key: str | None) -> Task:
        """The first task of a duplicate key that only the store still holds (``accept``
        left ``task`` None and named it in ``lookup``): read back, and checked to be the same
        work as the duplicate, as a duplicate found in memory is. Every edge calls this."""
        task = await self.task(task_id)
        if task is None:
            raise ReachError("the first task of this idempotency key was not found")
        if capability:
            self.check_same_work(task, names.normalize(capability), key or "")
        return task

    def accept(self, request: SubmitRequest,
               sink: Callable[[str, int, Any], None] | None = None) -> Admission:
        """Check, record and start a task without waiting: the caller acknowledges it once
        ``commit`` completes. Raises the typed ``ReachError`` when the task is refused.
        ``sink`` receives the task's stream chunks (task id, seq, data). Every decision goes
        to the audit log, when one is kept."""
        if self.audit is None:
            return self._accept(request, sink)
        try:
            admission = self._accept(request, sink)
        except ReachError as exc:
            self.audit.refused(request, exc)
            raise
        self.audit.admitted(request, admission)
        return admission

    def _accept(self, request: SubmitRequest,
                sink: Callable[[str, int, Any], None] | None) -> Admission:
        req, caller = request, request.caller
        if not self.accepting:
            raise Unavailable("the coordinator is shutting down; retry on another one")
        capability = req.capability or admission.by_intent(
            self.registry, req.intent or "", self.router.may_call(caller, self.registry.declaring))
        try:
            cap = names.normalize(capability)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None
        key = None if req.idempotency_key is None else scoped_key(caller, req.idempotency_key)
        if key is not None and key in self.book.keys:
            first_id = self.book.keys[key]
            first = self.find(first_id)
            if first is not None:
                self.check_same_work(first, cap, req.idempotency_key or "")
                if sink is not None and first_id in self.book.live:
                    self.book.add_chunk_sink(first_id, sink)
            commit = self.book.commits.get(first_id)
            return Admission(first, True, commit if commit is not None and not commit.done()
                             else None, first_id)
        declaring = self.registry.declaring(cap)
        fail_fast = req.call and req.queue_wait is None  # (a call that did not ask to wait)
        tags = tagging.check(req.tags) if req.tags else None
        steps = self.chains.steps(req) if req.then or req.notify or req.link else ()
        if declaring or cap not in self.known:
            self.router.admit(cap, req.params, caller, declaring, self.registry.names, tags,
                              typed=capability)
        elif fail_fast:  # (a submit waits for the agents: its params are checked on pick)
            raise admission.not_connected(cap, self.known[cap])
        plan = self.fallbacks.plan(req, cap, declaring)
        if fail_fast and plan is None and (not any(r.reachable for r in declaring.values()) or (
                tags and not admission.any_tagged(declaring, tags))):  # (a plan: it answers)
            raise admission.unreachable(cap, declaring, tags, self.clock.wall())
        if self.book.backlog.tasks and cap in self.book.backlog.tasks:
            admission.check_backlog(self.book.backlog, cap, self.settings, self.clock.wall())
        live = self.book.usage(caller)
        if live >= self.settings.max_caller_tasks:
            raise Rejected(
                f"caller {caller!r} has {live} unfinished tasks, its limit "
                f"(max_caller_tasks); wait for some to finish", level=1.0, capability=cap)
        now = self.clock.wall()
        if req.intent and req.capability and not req.routed:  # a caller chose for its words
            admission.chosen(self.registry, req.intent, cap, caller, now, self.on_learned)
        self.submitters.note(caller, now)
        task_id = os.urandom(16).hex()
        # A W3C traceparent from the caller names the trace; agents get one naming this task.
        trace_id = req.trace_id or traces.trace_id_of(req.traceparent)
        if trace_id is None:
            trace_id = os.urandom(16).hex()
        elif req.link is None:  # (a chain's next step joins the trace its head joined)
            admission.check_join(self.book, trace_id, caller, req.parent_task_id)
        env = Envelope(
            task_id=task_id, trace_id=trace_id, capability=cap,
            params=req.params, caller=caller, idempotency_key=key or task_id,
            priority=req.priority, timeout=req.timeout,
            max_retries=self.settings.max_retries if req.max_retries is None
            else req.max_retries,
            created_at=now, parent_task_id=req.parent_task_id,
            traceparent=traces.child_traceparent(trace_id, task_id, req.traceparent),
            hedge=req.hedge, tags=tags, fallback=False if req.fallback is FOLLOWED else plan,
            parent_span=traces.span_id_of(req.traceparent) if req.traceparent else None,
            queue_wait=self.settings.queue_wait if fail_fast else req.queue_wait,
            fail_fast=fail_fast, notify=req.notify, then=steps, link=req.link,
        )
        task = new_task(env, now)
        self.book.track(task)
        self.budget.first(now)
        if self.events.active:
            self._publish(task, "accepted")
        self.book.remember_key(env.idempotency_key, task_id, now)
        if sink is not None:
            self.book.add_chunk_sink(task_id, sink)
        # The driver is scheduled before the store's writer wakes, so it routes the task and
        # records its first attempt before the insert row is built: one commit covers both.
        driver = self.driver.begin(task)
        commit = self.store.insert(task)
        self.book.committing(task_id, commit)

        def settled(c: asyncio.Future[None]) -> None:
            if c.cancelled() or c.exception() is not None:  # not stored: not accepted either
                driver.cancel()
                dup = None if c.cancelled() else c.exception()
                self.book.forget(task, dup)
                if isinstance(dup, DuplicateKey):  # the next repeat is answered from memory
                    self.book.remember_key(dup.key, dup.first_task_id, now)
                if self.audit is not None:
                    self.audit.ended(task, "not_stored")
            self.book.committed(task_id, c)  # then who waited on it (``then``)
        commit.add_done_callback(settled)
        return Admission(task, False, commit, task_id)

    check_same_work = staticmethod(admission.check_same_work)

    def contended(self, caller: str, within: float = 0.5) -> bool:
        """Whether another caller than ``caller`` submitted in the last ``within`` s."""
        return self.submitters.contended(caller, self.clock.wall(), within)

    # ------------------------------------------------------------ state and events

    def move(self, task: Task, state: TaskState, note: str = "") -> None:
        before = task.state
        task.move(state, self.clock.wall(), note)
        if before is S.QUEUED or state is S.QUEUED:
            self.book.backlog.moved(task, before)
        if self.events.active:
            self._publish(task, note)

    def _publish(self, task: Task, note: str) -> None:
        env = task.envelope
        last = task.attempts[-1] if task.attempts else None
        self.events.publish(TASK, {
            "task_id": env.task_id, "trace_id": env.trace_id,
            "parent_task_id": env.parent_task_id, "capability": env.capability,
            "caller": env.caller, "agent": None if last is None else last.agent,
            "attempt": None if last is None else last.number, "state": task.state.value,
            "note": note, "cost_ms": round((task.updated_at - env.created_at) * 1000, 3)})

    def breaker_moved(self, record: AgentRecord, before: BreakerState) -> None:
        after = record.breaker.state
        if after is not before:
            self.driver.wake(record.capabilities)
            self.events.publish(BREAKER, {"agent": record.name, "agent_id": record.agent_id,
                                          "from": before.value, "to": after.value,
                                          "fault_rate": record.breaker.fault_rate()})

    def agents_changed(self, record: AgentRecord | None = None) -> None:
        """The registry gained or lost healthy agents (``record``'s, or any): wake tasks
        waiting for one."""
        self.driver.wake(None if record is None else record.capabilities)
        # As many slot waiters per capability as agents declare it (a slot may have opened at
        # each), only for capabilities with waiters: a pass over every agent (or capability)
        # on every registration made connecting n agents cost n² (bench/registry.py).
        now = self.clock.now()
        for cap in self.slots.capabilities():
            declared = self.registry.index.get(cap)
            for _ in range(min(self.slots.waiting(cap), len(declared or ()))):
                self.slots.wake((cap,), now, self.book.usage)

    def slot_freed(self, record: AgentRecord) -> None:
        """A slot at ``record`` opened: wake a waiter for each capability it serves."""
        self.slots.wake(record.capabilities, self.clock.now(), self.book.usage)

    def emit_chunk(self, task_id: str, seq: int, data: Any) -> None:
        self.book.emit_chunk(task_id, seq, data)

    # ------------------------------------------------------------ lookups

    def find(self, task_id: str) -> Task | None:
        """A task still in memory: live, recently finished, or an unresolved dead letter."""
        return self.book.find(task_id)

    async def task(self, task_id: str) -> Task | None:
        return self.book.find(task_id) or await self.store.get(task_id)

    def outcome(self, task_id: str) -> asyncio.Future[Task] | None:
        """A future that completes with the task once it is terminal (None if not live)."""
        return self.book.outcome(task_id) or self.following.outcome(task_id)

    def watch(self, task_id: str, fn: Callable[[Task], None]) -> bool:
        """Call ``fn(task)`` the moment the task's outcome is released; False if not live."""
        return self.book.watch(task_id, fn) or self.following.watch(task_id, fn)

    def add_chunk_sink(self, task_id: str, sink: ChunkSink) -> None:
        self.book.add_chunk_sink(task_id, sink)

    # ------------------------------------------------------------ finishing

    def answered(self, task: Task, result: Any) -> None:
        """An agent's result arrived: the task succeeds now, in the reader's step, so the
        caller's answer leaves before the attempt's bookkeeping (the driver's, next)."""
        if not task.terminal:
            self.finish(task, S.SUCCEEDED, result=result)

    def finish(self, task: Task, state: TaskState, *, result: Any = None,
               error: ReachError | None = None, wire_error: dict[str, Any] | None = None,
               fall_back: bool = True) -> None:
        """End a task. One that would be dead may be answered by its fallback instead
        (``fall_back``; reach.gateway.fallback), now or once another capability answers."""
        if error is not None:
            wire_error = error.to_wire()
        if state is S.DEAD and fall_back and task.envelope.fallback is not False and \
                self.fallbacks.serve(task, wire_error,
                                     self.registry.declaring(task.envelope.capability)):
            return
        if state is S.SUCCEEDED and task.envelope.fallback:
            self.fallbacks.remember(task, result)
        task.result = result
        task.error = wire_error
        note = "" if wire_error is None else str(wire_error.get("message", ""))[:200]
        if task.fallback is not None:
            note = f"fallback: {task.fallback['kind']} ({task.fallback['reason']})"
        self.move(task, state, note)
        if task.envelope.then or task.envelope.link is not None:  # a chain's: the next step
            self.chains.ended(task)
        self.book.release(task)  # the answer first (a caller waits on it), the rest after
        if self.dispatch.timed_out:
            self.dispatch.stop_timed_out(task.task_id)
        try:
            self.store.update(task)
        except Exception:  # the task ended all the same: it must not stay live in memory
            log.exception("writing the end of task %s failed (a restart resumes it)", task.task_id)
        self.book.settle(task)
        if self.audit is not None:
            self.audit.ended(task)

    # ------------------------------------------------------------ recovery and replay

    def resume(self, task: Task) -> None:
        """Drive a task found unfinished in the store after a restart (same key, same id)."""
        task.state = S.PENDING
        for attempt in task.attempts:
            if attempt.outcome == Outcome.RUNNING:  # interrupted by the crash
                attempt.outcome, attempt.error = Outcome.LOST, "coordinator restarted"
        task.history.append((S.PENDING.value, self.clock.wall(), RESUMED))
        self.book.track(task)
        self.book.remember_key(task.envelope.idempotency_key, task.task_id,
                               task.envelope.created_at)
        self.store.update(task)
        self.driver.begin(task)

    def replay(self, task: Task) -> None:
        """Run a dead letter again: a fresh retry budget, no fallback, and never twice at once."""
        if task.task_id in self.book.live:
            raise InvalidParams(f"{task.task_id!r} is being replayed already; see reach.task()")
        task.envelope.fallback = False
        self.move(task, S.PENDING, replay_note(task.error))
        self.book.recent.pop(task.task_id, None)
        self.book.track(task)
        self.budget.first(self.clock.wall())
        self.store.update(task)
        self.driver.begin(task)
        if task.envelope.notify is not None and self.on_replay is not None:
            self.on_replay(task)  # its new end is told as its first was (reach.server.notify)

    def cancel(self, task_id: str, by: str, reason: str = "") -> Task | None:
        """End a live task as ``cancelled`` (reach.gateway.cancelling); None if not live."""
        return cancelling.cancel(self, self.book, self._drivers, task_id, by,
                                 self.clock.wall(), reason)

    @property
    def in_flight(self) -> int:
        """How many tasks this coordinator is driving now (what a stop would drain)."""
        return len(self._drivers)

    async def stop(self, drain: float) -> None:
        """Stop accepting; give running tasks ``drain`` seconds, then cancel the rest."""
        self.accepting = False
        await self._drivers.stop(drain)
        self.book.fail_waiters(Unavailable(
            "the coordinator stopped before the task ended; it resumes on restart"))
        self.slots.cancel_all()
        self.dispatch.deadlines.close()
        await self.following.close(Unavailable("the coordinator stopped before the task ended"))
        await self.chains.stop()
