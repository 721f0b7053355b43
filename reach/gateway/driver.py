"""One driver per accepted task: it carries out the task's life (``reach.core.life``).

The life decides, from plain events, what the task does next: pick an agent, go back to the
one a restart or a lost peer left holding the work, dispatch, fail over, back off and retry
within the retry budget, wait for agents or breakers, or end. A driver carries each command
out: it picks an agent (waiting in the slot queue when all are busy), has the ``Dispatcher``
carry out an attempt, waits, counts and writes, and feeds each request's answer back as the
next event. All time is the gateway's ``ports.Clock``; nothing here reads the event loop's
clock or sleeps by itself.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Protocol

from reach.config import Settings
from reach.core import policy
from reach.core import tags as tagging
from reach.core.agents import AgentRecord
from reach.core.life import (
    REQUESTS,
    AgentIs,
    Budget,
    Charge,
    Command,
    CountRejected,
    CountRetry,
    Dispatch,
    Ended,
    Event,
    Finish,
    Life,
    LookFor,
    Move,
    NoneFits,
    Pick,
    Picked,
    Refused,
    Sleep,
    Update,
    WaitAgents,
    WaitedOut,
)
from reach.core.metrics import Metrics
from reach.core.registry import Registry
from reach.core.resilience import RetryBudget
from reach.core.routing import Router, Saturated
from reach.core.tasks import Attempt, Outcome, Task, TaskState
from reach.errors import (
    InvalidParams,
    NoRoute,
    ReachError,
    ReachTimeout,
    Rejected,
    Unauthorized,
    Unavailable,
)
from reach.gateway.agent_waits import AgentWaits
from reach.gateway.book import TaskBook
from reach.gateway.clock import within
from reach.gateway.crew import Crew
from reach.gateway.dispatch import Dispatcher
from reach.gateway.runs import WOKE, Run
from reach.gateway.slots import Queueing, SlotQueue, backlog_over
from reach.ports import Clock, TaskStore

S = TaskState


class Finisher(Protocol):
    """The gateway's side of a driver: state changes and the end of a task."""

    def move(self, task: Task, state: TaskState, note: str = "") -> None: ...

    def finish(self, task: Task, state: TaskState, *, result: Any = None,
               error: ReachError | None = None,
               wire_error: dict[str, Any] | None = None) -> None: ...


class Driver:
    def __init__(self, settings: Settings, registry: Registry, router: Router,
                 store: TaskStore, clock: Clock, rng: random.Random, book: TaskBook,
                 slots: SlotQueue, dispatch: Dispatcher, metrics: Metrics,
                 budget: RetryBudget, gateway: Finisher, crew: Crew) -> None:
        self.settings = settings
        self.registry = registry
        self.router = router
        self.store = store
        self.clock = clock
        self.rng = rng
        self.book = book
        self.slots = slots
        self.dispatch = dispatch
        self.metrics = metrics
        self.budget = budget
        self.g = gateway
        self.crew = crew  # owns each task's run, or the coroutine it was handed to
        # Who waits for the agents of a capability to change (reach.gateway.agent_waits)
        waits = AgentWaits()
        self.wake, self.on_agents, self.off_agents = waits.wake, waits.on, waits.off

    async def wait_for_agents(self, limit: float, capability: str) -> None:
        """``on_agents`` for a coroutine (a hedged life's): back at the change or at ``limit``."""
        changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not changed.done():
                changed.set_result(None)

        self.on_agents(wake, capability)
        try:
            await within(self.clock, changed, limit)
        finally:
            self.off_agents(wake, capability)

    # ------------------------------------------------------------ carrying a life out

    def begin(self, task: Task) -> Run:
        """Start carrying out ``task``'s life (reach.core.life): by callbacks while nothing
        needs a coroutine (reach.gateway.runs), at the next turn of the loop (so a new task
        is routed and its first attempt recorded before its insert row is built: one commit
        covers both). The run is the crew's, named ``task-<id>``, until the life ends."""
        run = Run(self, Life(task, self.settings, self.rng))
        self.crew.hold(run.name, run)
        asyncio.get_running_loop().call_soon(run.start)
        return run

    async def carry(self, life: Life, commands: list[Command]) -> None:
        """Carry ``life`` out in a coroutine from ``commands`` on: each request's answer is
        awaited and fed back as the next event."""
        task = life.task
        try:
            while (request := self.apply_all(task, commands)) is not None:
                commands = life.on(await self._do(life, request), self.clock.now())
        except asyncio.CancelledError:
            # Coordinator stopping: the task stays unfinished in the store and resumes later.
            raise
        except Exception as exc:
            self.fail(task, exc)

    async def _do(self, life: Life, command: Command) -> Event:
        """Carry out a request; its answer is the life's next event."""
        task = life.task
        if isinstance(command, Dispatch):
            verdict, payload, attempt, record = await self.dispatch.run(
                task, command.record, command.deadline, command.kept)
            return self.ended(life, verdict, payload, attempt, record)
        if isinstance(command, Pick):
            try:
                return Picked(await self._acquire(task, command))
            except Unavailable as exc:
                return self.none_fits(task, exc)
            except Rejected as exc:
                return Refused(exc)
            except ReachTimeout as exc:
                return WaitedOut(exc)
        if isinstance(command, WaitAgents):
            await self.wait_for_agents(command.seconds, task.envelope.capability)
        elif isinstance(command, Sleep):
            await self.clock.sleep(command.seconds)
        else:
            event = self.answer_now(task, command)
            assert event is not None
            return event
        return WOKE

    def answer_now(self, task: Task, command: Command) -> Event | None:
        """The answer to a request that needs no waiting (``Charge``, ``LookFor``), else
        None."""
        if isinstance(command, Charge):
            return Budget(self.budget.spend(self.clock.wall()))
        if isinstance(command, LookFor):
            capability = task.envelope.capability
            found = self.registry.by_id.get(command.agent_id)
            return AgentIs(found, found is not None and _ready(found, capability),
                           self._idempotent(capability))
        return None

    def apply_all(self, task: Task, commands: list[Command]) -> Command | None:
        """Carry out the commands that need no answer; the request among them (always the
        last), or None when the life ended."""
        request = None
        for command in commands:
            if type(command) in REQUESTS:
                request = command
            else:
                self.apply(task, command)
        return request

    def apply(self, task: Task, command: Command) -> None:
        """Carry out a command that needs no answer."""
        if isinstance(command, Finish):
            self.g.finish(task, command.state, result=command.result, error=command.error,
                          wire_error=command.wire_error)
        elif isinstance(command, Move):
            self.g.move(task, command.state, command.note)
        elif isinstance(command, Update):
            self.store.update(task)
        elif isinstance(command, CountRetry):
            self.metrics.retried(task.envelope.capability, command.agent)
        else:
            assert isinstance(command, CountRejected)
            self.metrics.rejected(task.envelope.capability)

    def fail(self, task: Task, exc: Exception) -> None:
        """End a task a bug broke (unless it ended already): a caller must not wait
        forever."""
        if not task.terminal:
            self.g.finish(task, S.DEAD, error=ReachError(f"internal error: {exc!r}"))

    def ended(self, life: Life, verdict: policy.Verdict, payload: Any, attempt: Attempt,
              record: AgentRecord) -> Ended:
        """The event of an attempt's end, with the registry's facts the life needs."""
        env = life.task.envelope
        spec = record.capabilities.get(env.capability)
        # Whether an untried agent is left matters only for work never delivered
        # (policy.after_attempt): the registry is not scanned after every success.
        others = verdict.outcome is Outcome.UNDELIVERED and \
            self._others_left(env.capability, {*life.exclude, record.agent_id}, env.tags)
        return Ended(verdict, payload, attempt, record,
                     spec is not None and spec.spec.idempotent, others)

    def pick_now(self, task: Task, exclude: frozenset[str]) -> Event | None:
        """A pick that needs no waiting, or None when it may have to wait for a slot (every
        agent busy, or a less busy caller waits for one): ``queueing`` and ``try_slot``."""
        env = task.envelope
        if task.state is S.QUEUED or \
                self.slots.yields_to(env.capability, env.caller, self.book.usage):
            return None
        try:
            return Picked(self._pick(task, exclude))
        except Unavailable as exc:
            return self.none_fits(task, exc)
        except Saturated:
            return None

    def none_fits(self, task: Task, exc: Unavailable) -> Event:
        """``NoneFits``; or ``Refused`` when the agents declaring the capability now refuse
        the task itself (params, scope): one accepted while none was connected, or whose
        agents changed while it waited."""
        env = task.envelope
        declaring = self.registry.declaring(env.capability)
        if declaring:
            try:
                self.router.admit(env.capability, env.params, env.caller, declaring,
                                  self.registry.names, env.tags)
            except (InvalidParams, NoRoute, Unauthorized) as bad:
                return Refused(bad)
        return NoneFits(exc, *self._breaker_wait(env.capability))

    def _others_left(self, capability: str, exclude: set[str],
                     tags: tagging.Wanted | None = None) -> bool:
        now = self.clock.wall()
        return any(r.agent_id not in exclude and r.reachable and r.breaker.allows(now)
                   and (not tags or tagging.matches(
                       tagging.parse(r.capabilities[capability].spec.tags), tags))
                   for r in self.registry.declaring(capability).values())

    def _breaker_wait(self, capability: str) -> tuple[float | None, bool]:
        """policy.breaker_wait for ``capability``'s agents, and whether a probe is out."""
        now = self.clock.wall()
        blocked = [r.breaker for r in self.registry.declaring(capability).values()
                   if r.reachable and not r.breaker.allows(now)]
        wait = policy.breaker_wait(blocked, now,
                                   capability_healthy=self.dispatch.mostly_healthy(capability),
                                   probe_wait=self.settings.breaker_open_for)
        return wait, wait is not None and any(b.probing for b in blocked)

    def _idempotent(self, capability: str) -> bool:
        return any(r.capabilities[capability].spec.idempotent
                   for r in self.registry.declaring(capability).values())

    async def _acquire(self, task: Task, pick: Pick) -> AgentRecord:
        """An agent with a free slot; waits its turn when all are saturated."""
        env = task.envelope
        q = self.queueing(task, pick)
        while (record := self.try_slot(task, q)) is None:
            # (a waiter that lost the race for a slot keeps its age: ``q.since``)
            await self.slots.wait(env.capability, env.priority, q.since, q.left, env.caller)
        return record

    def queueing(self, task: Task, pick: Pick) -> Queueing:
        """A pick that may wait for a slot: up to ``pick.until`` (a submit), or its wait."""
        env = task.envelope
        now = self.clock.now()
        until = pick.until
        if until is None:
            until = now + (self.settings.queue_wait if env.queue_wait is None
                           else env.queue_wait)
        # Already queued when the life comes back here (a resumed task that waited for its
        # agent, or a wait for breakers): it stays queued, it does not queue again. And a
        # newcomer does not take a slot that a less busy caller is waiting for.
        since = now
        if pick.until is not None:  # a submit keeps its place from its submit, across restarts
            since -= max(0.0, self.clock.wall() - env.created_at)
        return Queueing(pick.exclude, pick.deadline, since, until, task.state is S.QUEUED,
                        self.slots.yields_to(env.capability, env.caller, self.book.usage),
                        pick.until is not None)

    def try_slot(self, task: Task, q: Queueing) -> AgentRecord | None:
        """One try of ``q``'s pick: the agent, or None when the task must wait (up to
        ``q.left`` seconds) in the slot queue, queued by then. Raises ``Unavailable`` as the
        router does, ``Rejected`` when shed or when a call's time to wait is over, or
        ``ReachTimeout`` when a submit's wait in the backlog is (``backlog_over``)."""
        env = task.envelope
        clock = self.clock
        try:
            if q.fair_wait:
                q.fair_wait = False
                raise Saturated(1.0)
            try:
                return self._pick(task, q.exclude)
            except Saturated:
                q.exclude = frozenset()  # (_pick tried the tried agents too: all full)
                raise
        except Saturated as sat:
            if sat.shed:
                # Shed: the free slots are kept for higher priorities. Refused at once
                # (a wake-up this waiter took is passed on to the next one).
                if q.queued:
                    self.slots.wake((env.capability,), clock.now(), self.book.usage)
                raise Rejected(
                    f"{env.capability!r} is above its high-water mark; priority "
                    f"{env.priority} is shed first (the free slots are kept for priority "
                    f"{self.router.shed_below} and above): slow down and retry",
                    level=self._pressure(env.capability, sat), shed=True,
                    capability=env.capability) from None
            left = q.until - clock.now()
            if q.deadline is not None:
                left = min(left, q.deadline - clock.now())
            if left <= 0:
                if q.backlog:
                    raise backlog_over(env, q, clock.now(), self.settings.max_wait) from None
                raise Rejected(
                    f"every agent for {env.capability!r} is at its max_concurrency; "
                    f"slow down and retry", level=self._pressure(env.capability, sat),
                    capability=env.capability) from None
            if not q.queued:
                self.g.move(task, S.QUEUED, "waiting for a free slot")
                q.queued = True
            q.left = left
            return None

    def slot_event(self, task: Task, q: Queueing) -> Event | None:
        """``try_slot`` as the life's next event (``Picked``, ``NoneFits``, ``Refused``), or
        None while the task must wait for a slot."""
        try:
            record = self.try_slot(task, q)
        except Unavailable as exc:
            return self.none_fits(task, exc)
        except Rejected as exc:
            return Refused(exc)
        except ReachTimeout as exc:
            return WaitedOut(exc)
        return None if record is None else Picked(record)

    def _pick(self, task: Task, exclude: frozenset[str]) -> AgentRecord:
        """``router.pick`` of an agent not in ``exclude``; when those not yet tried are gone
        or full, of any (a tried agent with a free slot is better than waiting, and being
        rejected). Raises ``Unavailable`` or ``Saturated`` as the router does."""
        env = task.envelope
        declaring = self.registry.declaring(env.capability)
        now = self.clock.wall()
        try:
            return self.router.pick(env.capability, env.params, env.caller, declaring, now,
                                    exclude, self.dispatch.observed, env.tags, env.priority)
        except (Unavailable, Saturated):
            if not exclude:
                raise
            return self.router.pick(env.capability, env.params, env.caller, declaring, now,
                                    frozenset(), self.dispatch.observed, env.tags,
                                    env.priority)

    def _pressure(self, capability: str, sat: Saturated) -> float:
        capacity = sum(r.max_concurrency for r in self.registry.declaring(capability).values()
                       if r.reachable)
        return policy.pressure(sat.level, capacity, self.slots.waiting(capability))


def _ready(record: AgentRecord, capability: str) -> bool:
    return (record.reachable and capability in record.capabilities
            and record.room(capability))
