"""The gateway: accepts tasks durably, routes them, delivers them, and sees each one to an end.

Every accepted task is driven by one coroutine the gateway owns (``_drive``): pick an agent,
have the ``Dispatcher`` (reach.dispatch) carry out an attempt, then finish, fail over, back off
and retry (within the retry budget), or dead-letter. Decisions come from the pure core
(routing, resilience, tasks); this module only applies them.

Retry rules (DESIGN.md, "Agent faults vs answers"): a delivery that was never acknowledged fails
over to another candidate at once; a fault, lost connection or completion timeout after the ack
is retried only for idempotent capabilities; a ``TaskError`` answer is final.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from reach.config import Settings
from reach.core import counts, names, traces
from reach.core import intent as intents
from reach.core.keys import scoped_key
from reach.core.metrics import Metrics
from reach.core.registry import AgentRecord, Registry
from reach.core.resilience import BreakerState, RetryBudget
from reach.core.routing import Router, Saturated
from reach.core.tasks import Envelope, SubmitRequest, Task, TaskState, new_task
from reach.errors import (
    InvalidParams,
    NoRoute,
    ReachError,
    ReachTimeout,
    Rejected,
    TaskFailed,
    Unauthorized,
    Unavailable,
)
from reach.gateway.dispatch import Dispatcher
from reach.gateway.events import BREAKER, DEAD_LETTER, TASK, EventBus
from reach.gateway.slots import SlotQueue
from reach.store.store import Store

S = TaskState
log = logging.getLogger("reach.gateway")


@dataclass(slots=True)
class Admission:
    """What ``Gateway.accept`` decided: the task (None when only the store knows it, see
    ``lookup``), whether it is a duplicate, and the commit to wait for before acknowledging."""

    task: Task | None
    duplicate: bool
    commit: asyncio.Future[None] | None
    lookup: str | None


class Gateway:
    def __init__(self, settings: Settings, registry: Registry, router: Router, store: Store,
                 clock: Callable[[], float], rng: random.Random | None = None) -> None:
        self.settings = settings
        self.registry = registry
        self.router = router
        self.store = store
        self.clock = clock
        self.rng = rng or random.Random()
        self.live: dict[str, Task] = {}
        self.recent: OrderedDict[str, Task] = OrderedDict()
        self.traces: dict[str, list[str]] = {}
        self.dead: dict[str, Task] = {}
        self.keys: dict[str, str] = {}  # caller-scoped idempotency key → task id
        self.caller_live: dict[str, int] = {}  # caller → its unfinished tasks
        # The two most recent distinct submitters and when (``contended``).
        self._last_callers: list[tuple[str | None, float]] = [(None, 0.0), (None, 0.0)]
        self._recent_bytes = 0  # about how much ``recent`` holds (params and results)
        self._recent_sizes: dict[str, int] = {}
        self._keys_capped = False
        self._key_ages: deque[tuple[float, str, str]] = deque()  # (created, key, task), by age
        self.known: dict[str, set[str]] = {}  # capability → agents that ever declared it
        self._outcomes: dict[str, asyncio.Future[Task]] = {}
        self._watchers: dict[str, list[Callable[[Task], None]]] = {}
        self._commits: dict[str, asyncio.Future[None]] = {}
        self._chunk_sinks: dict[str, list[Callable[[str, int, Any], None]]] = {}
        self._chunk_next: dict[str, int] = {}  # task id → the next chunk seq callers expect
        self._drivers: set[asyncio.Task[None]] = set()
        self.slots = SlotQueue(settings.priority_aging)
        self.events = EventBus(clock)
        self.metrics = Metrics()
        self.budget = RetryBudget(settings.retry_budget, settings.retry_budget_min,
                                  settings.retry_budget_window)
        self.dispatch = Dispatcher(settings, registry, router, store, clock, self.metrics,
                                   self.budget, move=self._move,
                                   breaker_moved=self.breaker_moved, slot_freed=self.slot_freed,
                                   emit_chunk=self._emit_chunk, answered=self._answered)
        self._agents_changed = asyncio.Event()
        self.accepting = True
        registry.listen(lambda _record: self.agents_changed())

    # ------------------------------------------------------------ submit

    async def submit(self, request: SubmitRequest) -> tuple[Task, bool]:
        """Accept a task and return once it is committed: (task, duplicate)."""
        admission = self.accept(request)
        task = admission.task
        if task is None:  # a duplicate key whose first task is no longer in memory
            task = await self.task(admission.lookup or "")
            if task is None:
                raise ReachError("the first task of this idempotency key was not found")
        if admission.commit is not None:
            await asyncio.shield(admission.commit)
        return task, admission.duplicate

    def accept(self, request: SubmitRequest,
               sink: Callable[[str, int, Any], None] | None = None) -> Admission:
        """Check, record and start a task without waiting: the caller acknowledges it once
        ``commit`` completes. Raises the typed ``ReachError`` when the task is refused.
        ``sink`` receives the task's stream chunks (task id, seq, data)."""
        r = request
        capability, params, caller = r.capability, r.params, r.caller
        idempotency_key, priority, timeout = r.idempotency_key, r.priority, r.timeout
        max_retries, trace_id, parent_task_id = r.max_retries, r.trace_id, r.parent_task_id
        traceparent, intent, hedge = r.traceparent, r.intent, r.hedge
        if not self.accepting:
            raise Unavailable("the coordinator is shutting down; retry on another one")
        if not capability:
            capability = self._by_intent(intent or "")
        try:
            cap = names.normalize(capability)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None
        key = None if idempotency_key is None else scoped_key(caller, idempotency_key)
        if key is not None and key in self.keys:
            first_id = self.keys[key]
            first = self.find(first_id)
            if first is not None:
                self.check_same_work(first, cap, idempotency_key or "")
                if sink is not None and first_id in self.live:
                    self.add_chunk_sink(first_id, sink)
            commit = self._commits.get(first_id)
            return Admission(first, True, commit if commit is not None and not commit.done()
                             else None, first_id)
        declaring = self.registry.declaring(cap)
        if not declaring and cap in self.known:
            raise Unavailable(
                f"{cap!r} is declared by {sorted(self.known[cap])}, not connected now "
                f"(after a restart agents reconnect by themselves); retry shortly",
                capability=cap)
        self.router.admit(cap, params, caller, declaring, self.registry.names)
        # Declared but nobody healthy right now: say so at once rather than accept and wait.
        if not any(r.reachable for r in declaring.values()):
            raise Unavailable(
                f"{len(declaring)} agent(s) declare {cap!r} but none is online; "
                f"see `reach.agents()`", capability=cap)
        live = self.caller_live.get(caller, 0)
        if live >= self.settings.max_caller_tasks:
            raise Rejected(
                f"caller {caller!r} has {live} unfinished tasks, its limit "
                f"(max_caller_tasks); wait for some to finish", level=1.0, capability=cap)
        now = self.clock()
        self._note_caller(caller, now)
        task_id = os.urandom(16).hex()
        # A W3C traceparent from the caller names the trace; agents get one naming this task.
        trace_id = trace_id or traces.trace_id_of(traceparent)
        if trace_id is None:
            trace_id = os.urandom(16).hex()
        else:
            self._check_join(trace_id, caller, parent_task_id)
        traceparent = traces.child_traceparent(trace_id, task_id, traceparent)
        env = Envelope(
            task_id=task_id, trace_id=trace_id, capability=cap,
            params=params, caller=caller, idempotency_key=key or task_id,
            priority=priority, timeout=timeout,
            max_retries=self.settings.max_retries if max_retries is None else max_retries,
            created_at=now, parent_task_id=parent_task_id, traceparent=traceparent,
            hedge=hedge,
        )
        task = new_task(env, now)
        self._track(task)
        self.budget.first(now)
        if self.events.active:
            self._publish_task(task, "accepted")
        self.remember_key(env.idempotency_key, task_id, now)
        if sink is not None:
            self.add_chunk_sink(task_id, sink)
        # The driver is scheduled before the store's writer wakes, so it routes the task and
        # records its first attempt before the insert row is built: one commit covers both,
        # and the invoke leaves right after it (see _attempt).
        driver = self._spawn(task)
        commit = self.store.insert(task)
        self._commits[task_id] = commit

        def settled(c: asyncio.Future[None]) -> None:
            self._commits.pop(task_id, None)
            if c.cancelled() or c.exception() is not None:  # not stored: not accepted either
                driver.cancel()
                self._unlive(task)
                self._outcomes.pop(task_id, None)
                self._watchers.pop(task_id, None)
                self._chunk_sinks.pop(task_id, None)
                ids = self.traces.get(env.trace_id)
                if ids is not None and task_id in ids:
                    ids.remove(task_id)
                    if not ids:
                        del self.traces[env.trace_id]
                if self.keys.get(env.idempotency_key) == task_id:
                    del self.keys[env.idempotency_key]
        commit.add_done_callback(settled)
        return Admission(task, False, commit, task_id)

    @staticmethod
    def check_same_work(first: Task, capability: str, key: str) -> None:
        """A key names one piece of work: reusing it for another capability is a mistake
        that must not be answered with the other capability's result."""
        if first.envelope.capability != capability:
            raise InvalidParams(
                f"idempotency key {key!r} was already used for "
                f"{first.envelope.capability!r}; use a new key for {capability!r}",
                task_id=first.task_id)

    def _note_caller(self, caller: str, now: float) -> None:
        last = self._last_callers
        if last[0][0] == caller:
            last[0] = (caller, now)
        else:
            last[1], last[0] = last[0], (caller, now)

    def contended(self, caller: str, within: float = 0.5) -> bool:
        """Whether a caller other than ``caller`` submitted work in the last ``within`` s (the
        two most recent submitters are kept, so this costs the same for any number)."""
        other = self._last_callers[1] if self._last_callers[0][0] == caller \
            else self._last_callers[0]
        return other[0] is not None and other[1] >= self.clock() - within

    def _check_join(self, trace_id: str, caller: str, parent_task_id: str | None) -> None:
        """A caller may add to a trace it started, or one whose ``parent_task_id`` task its
        agent is running (a nested call); not to a stranger's trace, whose views it would
        otherwise join (and whose operator would see its tasks as part of the chain)."""
        ids = self.traces.get(trace_id)
        if not ids:
            return
        root = self.find(ids[0])
        if root is None or root.envelope.caller == caller:
            return
        parent = None if parent_task_id is None else self.find(parent_task_id)
        if parent is not None and parent.envelope.trace_id == trace_id and \
                any(a.agent == caller for a in parent.attempts):
            return
        raise Unauthorized(
            f"trace {trace_id!r} belongs to another caller; start a new trace, or name as "
            f"parent_task_id the task your agent is running", trace_id=trace_id)

    def _by_intent(self, text: str) -> str:
        if not text.strip():
            raise InvalidParams("name a capability or state an intent")
        found, closest = intents.resolve(text, self.registry.intents())
        if found is None:
            raise NoRoute(f"no capability matches the intent {text!r}; name one explicitly",
                          intent=text, suggestions=closest)
        return found

    def _track(self, task: Task) -> None:
        if task.task_id not in self.live:
            counts.add(self.caller_live, task.envelope.caller)
        self.live[task.task_id] = task
        ids = self.traces.setdefault(task.envelope.trace_id, [])
        if task.task_id not in ids:  # a replay or resume is the same task, not a new hop
            ids.append(task.task_id)
        self._outcomes[task.task_id] = asyncio.get_running_loop().create_future()

    def _unlive(self, task: Task) -> None:
        if self.live.pop(task.task_id, None) is not None:
            counts.drop(self.caller_live, task.envelope.caller)

    def _move(self, task: Task, state: TaskState, note: str = "") -> None:
        task.move(state, self.clock(), note)
        if self.events.active:
            self._publish_task(task, note)

    def _publish_task(self, task: Task, note: str) -> None:
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
            self._wake()
            self.events.publish(BREAKER, {"agent": record.name, "agent_id": record.agent_id,
                                          "from": before.value, "to": after.value,
                                          "fault_rate": record.breaker.fault_rate()})

    def _spawn(self, task: Task) -> asyncio.Task[None]:
        driver = asyncio.get_running_loop().create_task(self._drive(task),
                                                        name=f"task-{task.task_id}")
        self._drivers.add(driver)
        driver.add_done_callback(self._drivers.discard)
        return driver

    # ------------------------------------------------------------ lookups

    def find(self, task_id: str) -> Task | None:
        """A task still in memory: live, recently finished, or an unresolved dead letter."""
        return self.live.get(task_id) or self.recent.get(task_id) or self.dead.get(task_id)

    async def task(self, task_id: str) -> Task | None:
        found = self.find(task_id)
        if found is None:
            found = await self.store.get(task_id)
        return found

    def outcome(self, task_id: str) -> asyncio.Future[Task] | None:
        """A future that completes with the task once it is terminal (None if not live)."""
        return self._outcomes.get(task_id)

    def watch(self, task_id: str, fn: Callable[[Task], None]) -> bool:
        """Call ``fn(task)`` the moment the task's outcome is released (synchronously, without
        the extra turn of the loop a future's callback costs). False if the task is not live."""
        if task_id not in self._outcomes:
            return False
        self._watchers.setdefault(task_id, []).append(fn)
        return True

    def add_chunk_sink(self, task_id: str, sink: Callable[[str, int, Any], None]) -> None:
        self._chunk_sinks.setdefault(task_id, []).append(sink)

    def _emit_chunk(self, task_id: str, seq: int, data: Any) -> None:
        # A losing hedge may stream on after the task was answered: nobody listens any more.
        if task_id not in self.live:
            return
        # A retried attempt streams again from 0: callers already have those chunks.
        if seq < self._chunk_next.get(task_id, 0):
            return
        self._chunk_next[task_id] = seq + 1
        for sink in self._chunk_sinks.get(task_id, ()):
            sink(task_id, seq, data)

    def _wake(self) -> None:
        """Wake tasks waiting for an agent (``_wait_for_agents``)."""
        self._agents_changed.set()
        self._agents_changed = asyncio.Event()

    def agents_changed(self) -> None:
        """The registry gained or lost healthy agents: wake tasks waiting for one."""
        self._wake()
        # As many slot waiters per capability as agents declare it (a slot may have opened at
        # each), counted per capability: a pass over every agent on every registration made
        # connecting n agents cost n² (bench/registry.py). Only capabilities with waiters are
        # looked at: a walk over every capability cost 11,000 look-ups per registration.
        now = asyncio.get_running_loop().time()
        for cap in self.slots.capabilities():
            declared = self.registry.index.get(cap)
            for _ in range(min(self.slots.waiting(cap), len(declared or ()))):
                self.slots.wake((cap,), now, self._usage)

    # ------------------------------------------------------------ driving one task

    async def _drive(self, task: Task) -> None:
        env = task.envelope
        loop = asyncio.get_running_loop()
        deadline = None if env.timeout is None else loop.time() + env.timeout
        resumed = bool(task.history) and task.history[-1][2] == "resumed"
        recovering_until = loop.time() + self.settings.recovery_grace if resumed else 0.0
        # A task interrupted by a crash goes back to the agent that was running it: only that
        # agent's cache knows the key, so another agent would run it a second time.
        lost = task.attempts[-1] if resumed and task.attempts and \
            task.attempts[-1].outcome == "lost" else None
        sticky = None if lost is None else lost.agent_id
        retries = 0
        # How long this task may wait for breakers to let work through instead of spending a
        # retry on "no healthy agent" (see _breaker_wait).
        probe_wait = self.settings.breaker_open_for
        exclude: set[str] = set()
        hops = 0
        max_hops = env.max_retries + 1 + 16
        try:
            while True:
                hops += 1
                if deadline is not None and loop.time() >= deadline:
                    self._finish(task, S.DEAD, error=ReachTimeout(
                        f"{env.capability!r} did not complete within {env.timeout}s"))
                    return
                if sticky is not None:
                    found = self.registry.by_id.get(sticky)
                    why = None
                    if found is not None and lost is not None and lost.instance is not None \
                            and found.instance != lost.instance:
                        # Back under its name, but as a new process: the key cache that knew
                        # this task is gone with the old one, and the work may have been done.
                        why = (f"agent {found.name!r} restarted while it was running "
                               f"{env.capability!r} and the coordinator was down; it may have "
                               f"done the work, and its new process cannot tell")
                    elif found is None or not self._ready(found, env.capability):
                        if loop.time() < recovering_until:
                            await self._wait_for_agents(min(0.5, recovering_until - loop.time()))
                            continue
                        why = (f"the agent that was running {env.capability!r} when the "
                               f"coordinator stopped did not come back within "
                               f"{self.settings.recovery_grace}s")
                    if why is not None:
                        if not self._idempotent(env.capability):
                            self._finish(task, S.DEAD, error=Unavailable(
                                f"{why}; not re-run elsewhere because the capability is not "
                                f"idempotent (check, then replay it if it did not run)",
                                agent_id=sticky))
                            return
                        sticky = None  # idempotent: safe to run again anywhere
                        continue
                    assert found is not None  # a missing agent set `why` above
                    record, sticky = found, None
                else:
                    try:
                        record = await self._acquire(task, frozenset(exclude), deadline)
                    except Unavailable as exc:
                        if loop.time() < recovering_until:
                            await self._wait_for_agents(min(0.5, recovering_until - loop.time()))
                            continue
                        wait = self._breaker_wait(env.capability) if probe_wait > 0 else None
                        if wait is not None:
                            waited = loop.time()
                            limit = min(wait, probe_wait)
                            if deadline is not None:
                                limit = min(limit, deadline - waited)
                            await self._wait_for_agents(max(0.0, limit))
                            probe_wait -= loop.time() - waited
                            continue
                        if retries < env.max_retries and hops < max_hops:
                            retries += 1
                            # Nothing was sent: waiting for an agent adds no load, so it
                            # does not spend the coordinator-wide retry budget.
                            if not await self._back_off(task, retries, deadline, str(exc),
                                                        charge=False):
                                return
                            exclude.clear()
                            continue
                        self._finish(task, S.DEAD, error=exc)
                        return
                    except Rejected as exc:
                        self.metrics.rejected(env.capability)
                        self._finish(task, S.FAILED, error=exc)
                        return
                kind, payload, attempt, record = await self.dispatch.run(task, record, deadline)
                if attempt.outcome == "ok":
                    if not task.terminal:  # else answered at once by _answered
                        self._finish(task, S.SUCCEEDED, result=payload)
                    return
                if attempt.outcome == "answer":
                    self._finish(task, S.FAILED, wire_error=payload)
                    return
                exclude.add(record.agent_id)
                if kind == "undelivered":
                    # Never acknowledged: fail over at once while another candidate is left;
                    # once every one was tried, it costs a retry like any other failure.
                    now = self.clock()
                    others = [r for r in self.registry.declaring(env.capability).values()
                              if r.agent_id not in exclude and r.reachable
                              and r.breaker.allows(now)]
                    if others and hops < max_hops:
                        continue
                    if retries < env.max_retries:
                        retries += 1
                        if not await self._back_off(task, retries, deadline,
                                                    attempt.error or kind):
                            return
                        exclude.clear()
                        continue
                idempotent = record.capabilities.get(env.capability)
                retryable = idempotent is not None and idempotent.spec.idempotent
                if retryable and retries < env.max_retries and hops < max_hops:
                    retries += 1
                    if not await self._back_off(task, retries, deadline,
                                                attempt.error or kind):
                        return
                    continue
                self._finish(task, S.DEAD, error=self._attempt_error(env, kind, payload,
                                                                     record, retryable))
                return
        except asyncio.CancelledError:
            # Coordinator stopping: the task stays unfinished in the store and resumes later.
            raise
        except Exception as exc:  # a bug here must not leave a caller waiting forever
            if not task.terminal:
                self._finish(task, S.DEAD, error=ReachError(f"internal error: {exc!r}"))

    @staticmethod
    def _ready(record: AgentRecord, capability: str) -> bool:
        return (record.reachable and capability in record.capabilities
                and record.inflight < record.max_concurrency)

    def _breaker_wait(self, capability: str) -> float | None:
        """When only breakers keep ``capability``'s agents from work: how long to wait for
        one to let work through, rather than spend a retry on a moment's "no healthy agent".

        - a half-open probe is out: until its verdict (a breaker change wakes waiters);
        - every breaker is resting, but most of the capability's recent attempts worked (the
          breakers tripped on noise): until the first one turns half-open;
        - otherwise (the capability is failing as a whole): None, fail fast."""
        now = self.clock()
        blocked = [r for r in self.registry.declaring(capability).values()
                   if r.reachable and not r.breaker.allows(now)]
        if not blocked:
            return None
        if any(r.breaker.probing for r in blocked):
            return self.settings.breaker_open_for
        if not self.dispatch.mostly_healthy(capability):
            return None
        return max(0.0, min(r.breaker.opened_at + r.breaker.open_for - now for r in blocked))

    def _idempotent(self, capability: str) -> bool:
        return any(r.capabilities[capability].spec.idempotent
                   for r in self.registry.declaring(capability).values())

    def _attempt_error(self, env: Envelope, kind: str, payload: Any, record: AgentRecord,
                       retryable: bool) -> ReachError:
        if kind == "timeout":
            return ReachTimeout(
                f"{env.capability!r} at agent {record.name!r} did not complete in time"
                + ("" if retryable else "; not retried: the capability is not idempotent"),
                agent=record.name)
        if kind == "error":
            return TaskFailed(str((payload or {}).get("message", "agent fault")),
                              remote={**(payload or {}), "agent": record.name})
        return TaskFailed(f"agent {record.name!r} went away while running the task"
                          + ("" if retryable else "; not retried: not idempotent"),
                          remote={"code": kind, "agent": record.name})

    async def _back_off(self, task: Task, retry: int, deadline: float | None,
                        why: str, *, charge: bool = True) -> bool:
        """Wait before retry number ``retry``; False (the task is dead-lettered) when the
        coordinator-wide retry budget refuses it (``charge``: the retry re-sends work)."""
        env = task.envelope
        if charge and not self.budget.spend(self.clock()):
            s = self.settings
            self._finish(task, S.DEAD, error=Unavailable(
                f"{env.capability!r} not retried: the coordinator's retry budget "
                f"({s.retry_budget:.0%} of first attempts over {s.retry_budget_window:.0f}s) "
                f"is spent, many tasks are failing at once; last failure: {why}. Replay it "
                f"from the dead letters once the cause is fixed", capability=env.capability))
            return False
        if charge:  # the metric counts retries that send work again, as the budget does
            last = task.attempts[-1].agent if task.attempts else None
            self.metrics.retried(env.capability, last)
        delay = self.settings.backoff.delay(retry - 1, self.rng)
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - asyncio.get_running_loop().time()))
        self._move(task, S.RETRYING, f"retry {retry} in {delay * 1000:.0f} ms: {why}")
        self.store.update(task)
        await asyncio.sleep(delay)
        return True

    async def _wait_for_agents(self, limit: float) -> None:
        try:
            async with asyncio.timeout(limit):
                await self._agents_changed.wait()
        except TimeoutError:
            pass

    async def _acquire(self, task: Task, exclude: frozenset[str],
                       deadline: float | None) -> AgentRecord:
        """An agent with a free slot; waits up to ``queue_wait`` when all are saturated."""
        env = task.envelope
        loop = asyncio.get_running_loop()
        queued_at = loop.time()
        wait_until = queued_at + self.settings.queue_wait
        # Already queued when the driver comes back here (a resumed task that waited for its
        # agent, or a wait for breakers): it stays queued, it does not queue again.
        queued = task.state is S.QUEUED
        # A newcomer does not take a slot that a less busy caller is waiting for.
        fair_wait = self.slots.yields_to(env.capability, env.caller, self._usage)
        while True:
            declaring = self.registry.declaring(env.capability)
            now = self.clock()
            try:
                if fair_wait:
                    fair_wait = False
                    raise Saturated(1.0)
                try:
                    return self.router.pick(env.capability, env.params, env.caller, declaring,
                                            now, exclude, self.dispatch.observed)
                except (Unavailable, Saturated):
                    if not exclude:
                        raise
                    # Those not yet tried are gone or full: a tried agent with a free slot is
                    # better than waiting (and being rejected).
                    exclude = frozenset()
                    return self.router.pick(env.capability, env.params, env.caller, declaring,
                                            now, exclude, self.dispatch.observed)
            except Saturated as sat:
                left = wait_until - loop.time()
                if deadline is not None:
                    left = min(left, deadline - loop.time())
                if left <= 0:
                    raise Rejected(
                        f"every agent for {env.capability!r} is at its max_concurrency; "
                        f"slow down and retry", level=self._pressure(env.capability, sat),
                        capability=env.capability) from None
                if not queued:
                    self._move(task, S.QUEUED, "waiting for a free slot")
                    queued = True
                # The first queued time is kept across wake-ups: a waiter that lost the race
                # for a slot keeps its age, it does not go to the back.
                await self.slots.wait(env.capability, env.priority, queued_at, left, env.caller)

    def _pressure(self, capability: str, sat: Saturated) -> float:
        """Back-pressure level 0.5..1: saturated, and how many wait per free-able slot."""
        capacity = sum(r.max_concurrency for r in self.registry.declaring(capability).values()
                       if r.reachable)
        waiting = self.slots.waiting(capability)
        return min(sat.level, 0.5 + 0.5 * waiting / max(1, capacity))

    def slot_freed(self, record: AgentRecord) -> None:
        """A slot at ``record`` opened: wake a waiter for each capability it serves."""
        self.slots.wake(record.capabilities, asyncio.get_running_loop().time(), self._usage)

    def _usage(self, caller: str) -> int:
        return self.caller_live.get(caller, 0)


    # ------------------------------------------------------------ finishing

    def _answered(self, task: Task, result: Any) -> None:
        """An agent's result arrived: the task succeeds now, in the reader's step, so the
        caller's answer leaves before the attempt's bookkeeping (breaker, latency windows,
        metrics), which the driver does next. Any result ends the task, as in ``_drive``."""
        if not task.terminal:
            self._finish(task, S.SUCCEEDED, result=result)

    def _finish(self, task: Task, state: TaskState, *, result: Any = None,
                error: ReachError | None = None, wire_error: dict[str, Any] | None = None
                ) -> None:
        if error is not None:
            wire_error = error.to_wire()
        task.result = result
        task.error = wire_error
        note = "" if wire_error is None else str(wire_error.get("message", ""))[:200]
        self._move(task, state, note)
        tid = task.task_id
        # The answer first (a caller waits on it), the bookkeeping after.
        fut = self._outcomes.pop(tid, None)
        watchers = self._watchers.pop(tid, ())
        if fut is not None and not fut.done():
            def release(_c: object = None) -> None:
                for fn in watchers:
                    try:
                        fn(task)
                    except Exception:  # one watcher's bug must not cost the others or
                        log.exception("a watcher of task %s failed", tid)  # the bookkeeping
                if not fut.done():
                    fut.set_result(task)
            commit = self._commits.get(tid)
            if commit is None or commit.done():
                release()
            else:  # answer only what was stored
                commit.add_done_callback(release)
        self.store.update(task)
        self._unlive(task)
        if state is S.DEAD:
            self.dead[tid] = task
            self.events.publish(DEAD_LETTER, {"action": "added", "task_id": tid,
                                              "capability": task.envelope.capability})
        elif self.dead.pop(tid, None) is not None:
            self.events.publish(DEAD_LETTER, {"action": "resolved", "task_id": tid,
                                              "capability": task.envelope.capability})
        self._keep_recent(task)
        if state is S.DEAD and len(self.dead) > self.settings.dead_letters_max:
            self._drop_dead(next(iter(self.dead)))
        self._chunk_sinks.pop(tid, None)
        self._chunk_next.pop(tid, None)

    def _keep_recent(self, task: Task) -> None:
        """Keep a finished task for status and traces, within ``recent_tasks`` and
        ``recent_bytes`` (older ones are read from the store)."""
        tid = task.task_id
        size = _footprint(task)
        self._recent_bytes += size - self._recent_sizes.get(tid, 0)
        self._recent_sizes[tid] = size
        self.recent[tid] = task
        self.recent.move_to_end(tid)
        s = self.settings
        while len(self.recent) > 1 and (len(self.recent) > s.recent_tasks
                                        or self._recent_bytes > s.recent_bytes):
            old_id, old = self.recent.popitem(last=False)
            self._recent_bytes -= self._recent_sizes.pop(old_id, 0)
            ids = self.traces.get(old.envelope.trace_id)
            if ids is not None and old_id in ids and old_id not in self.live:
                ids.remove(old_id)
                if not ids:
                    del self.traces[old.envelope.trace_id]

    # ------------------------------------------------------------ recovery and replay

    def resume(self, task: Task) -> None:
        """Drive a task found unfinished in the store after a restart (same key, same id)."""
        task.state = S.PENDING
        for attempt in task.attempts:
            if attempt.outcome == "running":  # interrupted by the crash
                attempt.outcome, attempt.error = "lost", "coordinator restarted"
        task.history.append((S.PENDING.value, self.clock(), "resumed"))
        self._track(task)
        self.remember_key(task.envelope.idempotency_key, task.task_id, task.envelope.created_at)
        self.store.update(task)
        self._spawn(task)

    def replay(self, task: Task) -> None:
        """Run a dead letter again with a fresh retry budget; it leaves the list on success."""
        self._move(task, S.PENDING, "replayed")
        self.recent.pop(task.task_id, None)
        self._track(task)
        self.budget.first(self.clock())
        self.store.update(task)
        self._spawn(task)

    def remember_key(self, key: str, task_id: str, created_at: float) -> None:
        self.keys[key] = task_id
        self._key_ages.append((created_at, key, task_id))
        if len(self._key_ages) > self.settings.idempotency_keys_max:
            # Memory over the TTL: the oldest keys go early (a repeat of one runs again).
            _, old_key, old_task = self._key_ages.popleft()
            if self.keys.get(old_key) == old_task and old_task not in self.live:
                del self.keys[old_key]
            if not self._keys_capped:
                self._keys_capped = True
                log.warning("more than %d idempotency keys within their TTL: the oldest are "
                            "forgotten early (raise idempotency_keys_max or lower "
                            "idempotency_ttl)", self.settings.idempotency_keys_max)

    def prune_dead(self, before: float) -> int:
        """Stop listing dead letters that died before ``before`` (the retention); their rows
        stay in the store, where ``status`` and ``replay`` still find them."""
        old = [tid for tid, t in self.dead.items()
               if t.state is S.DEAD and t.updated_at < before]
        for tid in old:
            self._drop_dead(tid)
        return len(old)

    def _drop_dead(self, task_id: str) -> None:
        task = self.dead.pop(task_id, None)
        if task is not None:
            self.events.publish(DEAD_LETTER, {"action": "expired", "task_id": task_id,
                                              "capability": task.envelope.capability})

    def prune_keys(self, before: float) -> int:
        """Forget the keys of tasks created before ``before`` (the TTL); returns how many."""
        ages, pruned = self._key_ages, 0
        while ages and ages[0][0] < before:
            _, key, task_id = ages.popleft()
            if self.keys.get(key) == task_id and task_id not in self.live:
                del self.keys[key]
                pruned += 1
        return pruned

    async def stop(self, drain: float) -> None:
        """Stop accepting; give running tasks ``drain`` seconds, then cancel the rest."""
        self.accepting = False
        if self._drivers:
            _, pending = await asyncio.wait(set(self._drivers), timeout=drain)
            for driver in pending:
                driver.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for fut in self._outcomes.values():
            if not fut.done():
                fut.set_exception(Unavailable(
                    "the coordinator stopped before the task ended; it resumes on restart"))
                fut.exception()  # retrieved: nobody may be waiting, that is not an error
        self.slots.cancel_all()


def _footprint(task: Task) -> int:
    """About the bytes a finished task holds: its params and result as JSON, plus the rest."""
    env = task.envelope
    size = 600 + 200 * len(task.attempts) + 60 * len(task.history)
    if env.params:
        size += len(to_json(env.params))
    if task.result is not None:
        size += len(to_json(task.result))
    return size
