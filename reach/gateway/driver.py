"""One driver per accepted task: ask the policy what to do next, await it, apply it.

A driver picks an agent (waiting for a free slot when all are busy), has the ``Dispatcher``
carry out an attempt, and then, as ``reach.core.policy`` decides: finishes the task, fails
over to another candidate, backs off and retries (within the retry budget), waits for agents
or breakers, or dead-letters it. A task resumed after a crash first goes back to the agent
that was running it (only that agent's key cache knows it). All time is the gateway's
``ports.Clock``; nothing here reads the event loop's clock or sleeps by itself.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Protocol

from reach.config import Settings
from reach.core import policy
from reach.core import tags as tagging
from reach.core.agents import AgentRecord
from reach.core.ends import attempt_error, maybe_ran
from reach.core.metrics import Metrics
from reach.core.registry import Registry
from reach.core.resilience import RetryBudget
from reach.core.routing import Router, Saturated
from reach.core.tasks import Attempt, Outcome, Task, TaskState
from reach.errors import ReachError, ReachTimeout, Rejected, Unavailable
from reach.gateway.book import TaskBook
from reach.gateway.clock import within
from reach.gateway.dispatch import Dispatcher
from reach.gateway.slots import SlotQueue
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
                 budget: RetryBudget, gateway: Finisher) -> None:
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
        self._changed: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """The agents changed: tasks waiting for one (``wait_for_agents``) look again."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def wait_for_agents(self, limit: float) -> None:
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await within(self.clock, self._changed, limit)

    # ------------------------------------------------------------ the loop

    async def drive(self, task: Task) -> None:
        env = task.envelope
        clock = self.clock
        resumed = bool(task.history) and task.history[-1][2] == "resumed"
        deadline = None if env.timeout is None else clock.now() + env.timeout
        tries = policy.Tries(env.max_retries)
        kept = None  # a resumed task's completion timeout, kept from before the restart
        lost = None
        if resumed:
            # A restart changes none of the task's budget: its deadline runs from its submit,
            # its tries so far count, and it keeps its completion timeout (the latency history
            # behind it is gone with the old process; a caller's deadline sets it otherwise).
            if env.timeout is not None:
                deadline = clock.now() + policy.time_left(env.created_at, env.timeout,
                                                          clock.wall())
            else:
                kept = policy.kept_timeout(a.timeout for a in task.attempts)
            tries = policy.resumed_tries(env.max_retries, task.history)
            # A task interrupted by a crash goes back to the agent that was running it: only
            # that agent's cache knows the key, so another agent would run it a second time.
            if task.attempts and task.attempts[-1].outcome == Outcome.LOST:
                lost = task.attempts[-1]
        recovering_until = clock.now() + self.settings.recovery_grace if resumed else 0.0
        # How long this task may wait for resting breakers to let work through instead of
        # spending a retry on "no healthy agent" (policy.breaker_wait). Waiting on a half-open
        # probe already out is not spent from it: the probe is an attempt with its own timeout,
        # its verdict wakes the waiters, and under load it can take longer than the open period
        # (200 replayed tasks then ran out of waiting and were dead-lettered again).
        allowance = self.settings.breaker_open_for
        exclude: set[str] = set()
        back_until: float | None = None  # going back to an agent a peer lost (see below)
        try:
            if lost is not None and not self._interrupted(task, tries, lost):
                return
            while True:
                if deadline is not None and clock.now() >= deadline:
                    self.g.finish(task, S.DEAD, error=ReachTimeout(
                        f"{env.capability!r} did not complete within {env.timeout}s"))
                    return
                if lost is not None:
                    record, lost, done = await self._back_to(task, lost, recovering_until)
                    if done:
                        return
                    if record is None:
                        continue
                else:
                    try:
                        record = await self._acquire(task, frozenset(exclude), deadline)
                    except Unavailable as exc:
                        if env.fallback and recovering_until <= clock.now():
                            # Degrade at once: the fallback answers now (Gateway.finish).
                            self.g.finish(task, S.DEAD, error=exc)
                            return
                        wait, probing = self._breaker_wait(env.capability) \
                            if allowance > 0 else (None, False)  # (spent: not worth looking)
                        step = policy.when_unavailable(
                            tries, recovering_for=recovering_until - clock.now(),
                            breaker_wait=wait, breaker_allowance=allowance,
                            deadline_left=None if deadline is None else deadline - clock.now())
                        if isinstance(step, policy.Wait):
                            waited = clock.now()
                            await self.wait_for_agents(step.seconds)
                            if step.for_breaker and not probing:
                                allowance -= clock.now() - waited
                            continue
                        if isinstance(step, policy.Retry):
                            if not await self._retry(task, tries, step, deadline, str(exc)):
                                return
                            exclude.clear()
                            continue
                        self.g.finish(task, S.DEAD, error=exc)
                        return
                    except Rejected as exc:
                        self.metrics.rejected(env.capability)
                        self.g.finish(task, S.FAILED, error=exc)
                        return
                tries.hops += 1  # a hop is a dispatch (as resumed_tries counts them): a wait
                # for agents, a breaker or a lost agent's return spends none
                verdict, payload, attempt, record = await self.dispatch.run(
                    task, record, deadline, kept)
                if verdict.outcome in (Outcome.LOST, Outcome.UNDELIVERED) and \
                        not verdict.full and \
                        record.node is not None and attempt.instance is not None and \
                        (back_until is None or clock.now() < back_until):
                    # Lost at an agent another node holds: that node went away with the work
                    # (its peer link ended, the agent's ack may have died with it) or lost the
                    # agent's connection (it was fenced: the agent moves to another node). The
                    # agent may have run it; only its key cache knows the key, so the task goes
                    # back to it, as a resumed one does (for up to recovery_grace from the first
                    # loss; at once elsewhere if it comes back as a new process), instead of
                    # running a second time at another agent. A loss again on the way back (the
                    # news that the agent moved has not come yet) waits for the agents to change.
                    back_until = await self._back_window(back_until)
                    lost, recovering_until = attempt, back_until
                    continue
                exclude.add(record.agent_id)
                spec = record.capabilities.get(env.capability)
                step = policy.after_attempt(
                    verdict, tries, idempotent=spec is not None and spec.spec.idempotent,
                    others_left=self._others_left(env.capability, exclude, env.tags))
                if isinstance(step, policy.GoBack):
                    if attempt.instance is None or \
                            (back_until is not None and clock.now() >= back_until):
                        self.g.finish(task, S.DEAD, error=maybe_ran(env, attempt))
                        return
                    # Its link went away before it acknowledged: back to that agent alone,
                    # once it reconnects as the same process (its key cache answers).
                    back_until = await self._back_window(back_until)
                    lost, recovering_until = attempt, back_until
                    continue
                if isinstance(step, policy.FailOver):
                    if step.free:  # the agent was full at its node: a wait, not a hop
                        tries.hops -= 1
                    continue
                if isinstance(step, policy.Retry):
                    if not await self._retry(task, tries, step, deadline,
                                             attempt.error or verdict.outcome):
                        return
                    if step.anywhere:
                        exclude.clear()
                    continue
                assert isinstance(step, policy.Finish)
                if step.state is S.SUCCEEDED:
                    if not task.terminal:  # else answered at once (Gateway.answered)
                        self.g.finish(task, S.SUCCEEDED, result=payload)
                elif step.state is S.FAILED:
                    self.g.finish(task, S.FAILED, wire_error=payload)
                else:
                    self.g.finish(task, S.DEAD, error=attempt_error(
                        env, attempt, payload, record, step.retryable))
                return
        except asyncio.CancelledError:
            # Coordinator stopping: the task stays unfinished in the store and resumes later.
            raise
        except Exception as exc:  # a bug here must not leave a caller waiting forever
            if not task.terminal:
                self.g.finish(task, S.DEAD, error=ReachError(f"internal error: {exc!r}"))

    async def _back_window(self, back_until: float | None) -> float:
        """Until when a task goes back to an agent that may have it: ``recovery_grace`` from
        the first loss; a loss again on the way back first waits for the agents to change."""
        if back_until is None:
            return self.clock.now() + self.settings.recovery_grace
        await self.wait_for_agents(policy.RECOVERY_POLL)
        return back_until

    def _interrupted(self, task: Task, tries: policy.Tries, lost: Attempt) -> bool:
        """A resumed task whose attempt the restart interrupted: sending it again (to that
        agent, or elsewhere if it does not come back) is a retry, counted like any other;
        False (the task is dead-lettered) when it was the last one ``max_retries`` allows."""
        env = task.envelope
        if not tries.may_retry():
            self.g.finish(task, S.DEAD, error=Unavailable(
                f"the coordinator restarted during attempt {lost.number} of "
                f"{env.capability!r} at agent {lost.agent!r}, its last (max_retries "
                f"{env.max_retries}); not sent again (it may have run): check, then replay it",
                agent_id=lost.agent_id))
            return False
        tries.retries += 1
        self.g.move(task, S.RETRYING, f"retry {tries.retries}: the coordinator restarted "
                                      f"during attempt {lost.number}")
        return True

    async def _back_to(self, task: Task, lost: Attempt, recovering_until: float
                       ) -> tuple[AgentRecord | None, Attempt | None, bool]:
        """A resumed task's first try: the agent that was running it, once it is back.
        Returns (agent to use, the lost attempt still to go back to, whether the task ended)."""
        env = task.envelope
        found = self.registry.by_id.get(lost.agent_id)
        why = None
        if found is not None and lost.instance is not None and found.instance != lost.instance:
            # Back under its name, but as a new process: the key cache that knew this task is
            # gone with the old one, and the work may have been done.
            why = (f"agent {found.name!r} restarted while it was running {env.capability!r} "
                   f"and the coordinator was down; it may have done the work, and its new "
                   f"process cannot tell")
        elif found is None or not _ready(found, env.capability):
            left = recovering_until - self.clock.now()
            if left > 0:
                await self.wait_for_agents(min(policy.RECOVERY_POLL, left))
                return None, lost, False
            why = (f"the agent that was running {env.capability!r} did not come back "
                   f"within {self.settings.recovery_grace}s")
        if why is None:
            return found, None, False
        if not self._idempotent(env.capability):
            self.g.finish(task, S.DEAD, error=Unavailable(
                f"{why}; not re-run elsewhere because the capability is not idempotent "
                f"(check, then replay it if it did not run)", agent_id=lost.agent_id))
            return None, None, True
        return None, None, False  # idempotent: safe to run again anywhere

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

    async def _retry(self, task: Task, tries: policy.Tries, step: policy.Retry,
                     deadline: float | None, why: str) -> bool:
        """Count the retry and wait before it; False (the task is dead-lettered) when the
        coordinator-wide retry budget refuses it (``step.charge``: it re-sends work)."""
        env = task.envelope
        tries.retries += 1
        if step.charge and not self.budget.spend(self.clock.wall()):
            s = self.settings
            self.g.finish(task, S.DEAD, error=Unavailable(
                f"{env.capability!r} not retried: the coordinator's retry budget "
                f"({s.retry_budget:.0%} of first attempts over {s.retry_budget_window:.0f}s) "
                f"is spent, many tasks are failing at once; last failure: {why}. Replay it "
                f"from the dead letters once the cause is fixed", capability=env.capability))
            return False
        if step.charge:  # the metric counts retries that send work again, as the budget does
            last = task.attempts[-1].agent if task.attempts else None
            self.metrics.retried(env.capability, last)
        delay = policy.retry_delay(self.settings.backoff, tries.retries, self.rng,
                                   None if deadline is None else deadline - self.clock.now())
        self.g.move(task, S.RETRYING, f"retry {tries.retries} in {delay * 1000:.0f} ms: {why}")
        self.store.update(task)
        await self.clock.sleep(delay)
        return True

    async def _acquire(self, task: Task, exclude: frozenset[str],
                       deadline: float | None) -> AgentRecord:
        """An agent with a free slot; waits up to ``queue_wait`` when all are saturated."""
        env = task.envelope
        clock = self.clock
        queued_at = clock.now()
        wait_until = queued_at + self.settings.queue_wait
        # Already queued when the driver comes back here (a resumed task that waited for its
        # agent, or a wait for breakers): it stays queued, it does not queue again.
        queued = task.state is S.QUEUED
        # A newcomer does not take a slot that a less busy caller is waiting for.
        fair_wait = self.slots.yields_to(env.capability, env.caller, self.book.usage)
        while True:
            declaring = self.registry.declaring(env.capability)
            now = clock.wall()
            try:
                if fair_wait:
                    fair_wait = False
                    raise Saturated(1.0)
                try:
                    return self.router.pick(env.capability, env.params, env.caller, declaring,
                                            now, exclude, self.dispatch.observed, env.tags,
                                            env.priority)
                except (Unavailable, Saturated):
                    if not exclude:
                        raise
                    # Those not yet tried are gone or full: a tried agent with a free slot is
                    # better than waiting (and being rejected).
                    exclude = frozenset()
                    return self.router.pick(env.capability, env.params, env.caller, declaring,
                                            now, exclude, self.dispatch.observed, env.tags,
                                            env.priority)
            except Saturated as sat:
                if sat.shed:
                    # Shed: the free slots are kept for higher priorities. Refused at once
                    # (a wake-up this waiter took is passed on to the next one).
                    if queued:
                        self.slots.wake((env.capability,), clock.now(), self.book.usage)
                    raise Rejected(
                        f"{env.capability!r} is above its high-water mark; priority "
                        f"{env.priority} is shed first (the free slots are kept for priority "
                        f"{self.router.shed_below} and above): slow down and retry",
                        level=self._pressure(env.capability, sat), shed=True,
                        capability=env.capability) from None
                left = wait_until - clock.now()
                if deadline is not None:
                    left = min(left, deadline - clock.now())
                if left <= 0:
                    raise Rejected(
                        f"every agent for {env.capability!r} is at its max_concurrency; "
                        f"slow down and retry", level=self._pressure(env.capability, sat),
                        capability=env.capability) from None
                if not queued:
                    self.g.move(task, S.QUEUED, "waiting for a free slot")
                    queued = True
                # The first queued time is kept across wake-ups: a waiter that lost the race
                # for a slot keeps its age, it does not go to the back.
                await self.slots.wait(env.capability, env.priority, queued_at, left, env.caller)

    def _pressure(self, capability: str, sat: Saturated) -> float:
        capacity = sum(r.max_concurrency for r in self.registry.declaring(capability).values()
                       if r.reachable)
        return policy.pressure(sat.level, capacity, self.slots.waiting(capability))


def _ready(record: AgentRecord, capability: str) -> bool:
    return (record.reachable and capability in record.capabilities
            and record.room(capability))
