"""Result chains at the gateway: a chain task's success starts its next step, a failure says
which step failed, a chain's waiters follow it to its end, and a restart resumes it.

``then`` is checked and a result is mapped by reach.core.chains (pure); this module carries
it out:

    head ──succeeded──► step 2 ──succeeded──► step 3 ...   (each a task of its own: same
                                                             caller and trace, parent = the
                                                             step before, key "<chain>#<n>")

- ``steps``: at submit, the steps checked (shape, names, pointers: ``invalid_params``; a step
  no agent ever declared: ``no_route``; one the caller may not call: ``unauthorized``).
- ``ended``: the gateway's hook in ``finish``, for chain tasks only. A success with steps
  left submits the next step through the gateway's own ``accept``, at once, from ``finish``:
  the step's insert and the note naming it in the task's history (``chains.NEXT``) are queued
  with the task's own final write, so one transaction stores all three, or none. A failure
  names its step in its error ("step 2 of 3 (report.build): ...", details ``chain``).
- ``follow``: whoever waits on a task that passed its result on waits on the next step.
- ``resume``: at start, the chain tasks that succeeded and whose next step was never created
  start it (its derived key makes that idempotent); ``carry_on`` does it for the ones a
  cluster's node took over from a dead node (reach.membership).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from reach.config import Settings
from reach.core import chains
from reach.core.chains import Link, Step
from reach.core.keys import unscoped_key
from reach.core.registry import Registry
from reach.core.routing import Router
from reach.core.tasks import SubmitRequest, Task, TaskState
from reach.errors import InvalidParams, NoRoute, ReachError, Unauthorized, from_wire
from reach.gateway import admission
from reach.gateway.admission import Admission
from reach.gateway.crew import Crew
from reach.ports import Clock, DuplicateKey, TaskStore

S = TaskState
log = logging.getLogger("reach.gateway")
Watcher = Callable[[Task], None]
#: Refusals that may pass (a full backlog, the caller's limit, a stop): the next step's
#: submit is tried again with backoff, for up to ``max_wait``; a restart tries it too.
TRANSIENT = frozenset({"rejected", "unavailable"})
RETRY_FIRST, RETRY_MOST = 0.05, 5.0  # seconds between those tries: first, at most


class Gateway(Protocol):
    """What chains need of the gateway."""

    settings: Settings
    registry: Registry
    router: Router
    store: TaskStore
    clock: Clock
    known: dict[str, set[str]]

    def accept(self, request: SubmitRequest) -> Admission: ...

    def watch(self, task_id: str, fn: Watcher) -> bool: ...

    def find(self, task_id: str) -> Task | None: ...

    async def task(self, task_id: str) -> Task | None: ...


class Chains:
    """The chains one gateway carries on (``Gateway.chains``)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.crew = Crew()  # store reads for followers, and retried submits of next steps
        # A chain task whose success has not started its next step yet (a refusal being
        # retried) → who waits on that next step.
        self._waiting: dict[str, list[Watcher]] = {}
        self._retrying: set[str] = set()
        # Told when a chain stops because its next step could not start (no task of that
        # step ends, so nothing else would say so): the failed stand-in for that step. The
        # webhooks send a chain's outcome from here, as from the task that ends a chain.
        self.on_stop: Watcher | None = None

    # ------------------------------------------------------------ at submit

    def steps(self, request: SubmitRequest) -> tuple[Step, ...]:
        """The chain steps (and webhook URL) a submit asks for, checked: a caller's ``then``
        also for names no agent ever declared and steps the caller may not call (a step the
        coordinator itself submits, ``request.link``, was checked with its head)."""
        steps = admission.follow(request)
        if steps and request.link is None:
            self.check(steps, request.caller)
        return steps

    def check(self, steps: tuple[Step, ...], caller: str) -> None:
        """Refuse a chain up front, as the gateway refuses its head: a step no agent ever
        declared is ``no_route``, one the caller may not call (call rules, judged on the
        agents declaring it now) is ``unauthorized``."""
        g = self.gateway
        may = g.router.may_call(caller, g.registry.declaring)
        for number, step in enumerate(steps, start=2):
            cap = step.capability
            declaring = g.registry.declaring(cap)
            if not declaring and cap not in g.known:
                raise NoRoute(f"then, step {number}: no agent declares {cap!r}",
                              capability=cap, step=number, suggestions=[])
            if may is not None and declaring and not may(cap):
                raise Unauthorized(f"then, step {number}: caller {caller!r} may not use "
                                   f"{cap!r}", capability=cap, caller=caller, step=number)

    # ------------------------------------------------------------ a chain task ends

    def ended(self, task: Task) -> None:
        """``finish``'s hook for a chain task, once its state is set and before its waiters
        are answered or its end is written: a success passes its result on to the next step;
        any other end names its step in its error. Never raises (``finish`` must go on)."""
        try:
            if task.state is S.SUCCEEDED:
                if task.envelope.then:
                    self._next(task)
            elif task.error is not None:
                env = task.envelope
                link = chains.place(task.task_id, env.then, env.link)
                error = dict(task.error)
                error["message"] = chains.named(str(error.get("message", "")), link,
                                                env.capability)
                error["details"] = {**(error.get("details") or {}), "chain": link.to_json()}
                task.error = error
        except Exception:  # a bug here must not leave the task unfinished
            log.exception("carrying on the chain of task %s failed", task.task_id)

    def _next(self, task: Task) -> bool:
        """Submit the step after ``task`` (succeeded): note it, or why it cannot start, in
        the task's history. False when it was refused for now (``TRANSIENT``): try later."""
        env = task.envelope
        step, link = env.then[0], chains.place(task.task_id, env.then, env.link)
        place = Link(link.head, link.step + 1, link.of)
        try:
            params = chains.params_for(step, task.result)
        except chains.Unmapped as exc:
            self._stop(task, InvalidParams(chains.named(str(exc), place, step.capability),
                                           chain=place.to_json()))
            return True
        key = chains.chain_key(unscoped_key(env.caller, env.idempotency_key), env.link)
        request = SubmitRequest(
            step.capability, params, env.caller, chains.step_key(key, place.step),
            env.priority, env.timeout, env.max_retries, env.trace_id, task.task_id,
            notify=env.notify, then=env.then[1:], link=place)
        try:
            started = self.gateway.accept(request)
        except ReachError as exc:
            if exc.code in TRANSIENT:
                self._retry_later(task)
                return False
            self._stop(task, from_wire({
                "code": exc.code, "message": chains.named(exc.message, place, step.capability),
                "details": {**exc.details, "chain": place.to_json()}}))
            return True
        next_id = started.task.task_id if started.task is not None else started.lookup or ""
        self._note(task, chains.NEXT + next_id)
        if started.commit is not None:
            started.commit.add_done_callback(lambda c: self._stored(task, next_id, c))
        self._answer_waiting(task)
        return True

    def _stored(self, task: Task, next_id: str, commit: asyncio.Future[None]) -> None:
        """The next step's insert is done: one another node committed first under the same
        key (a cluster) is the next step instead."""
        dup = None if commit.cancelled() else commit.exception()
        if isinstance(dup, DuplicateKey) and dup.first_task_id != next_id:
            self._note(task, chains.NEXT + dup.first_task_id)

    def _stop(self, task: Task, error: ReachError) -> None:
        """The next step cannot start (a result it cannot take, a refusal that will not
        pass): the chain ends here, and its waiters hear ``error``."""
        log.warning("chain of task %s stopped: %s", task.task_id, error.message)
        self._note(task, f"{chains.STOPPED}{error.code}: {error.message}"[:1000])
        self._answer_waiting(task)
        if self.on_stop is not None:
            try:
                self.on_stop(stand_in(task, error.code, error.message))
            except Exception:  # the listener's bug: the chain is stopped all the same
                log.exception("a listener of chain stops failed on task %s", task.task_id)

    def _note(self, task: Task, note: str) -> None:
        task.history.append((task.state.value, self.gateway.clock.wall(), note))
        self.gateway.store.update(task)  # (from ``finish``: the same write as its end)

    def _retry_later(self, task: Task) -> None:
        if task.task_id not in self._retrying:
            self._retrying.add(task.task_id)
            self.crew.spawn(self._retry(task), name=f"chain-{task.task_id}")

    async def _retry(self, task: Task) -> None:
        """Submit the next step again with backoff, until it is accepted or refused for
        good, or ``max_wait`` passes (then a restart tries again: nothing noted it)."""
        clock, delay = self.gateway.clock, RETRY_FIRST
        until = clock.wall() + self.gateway.settings.max_wait
        try:
            while clock.wall() < until:
                await clock.sleep(delay)
                delay = min(delay * 2, RETRY_MOST)
                if self._next(task):
                    return
        finally:
            self._retrying.discard(task.task_id)

    # ------------------------------------------------------------ following a chain

    def follow(self, task: Task, fn: Watcher) -> None:
        """``task`` succeeded and passes its result on: call ``fn`` with its next step once
        that ends, or with a failed stand-in for it when it could not start. (``fn`` sees a
        next step that passes its result on too, and follows it the same way.)"""
        task = self.gateway.find(task.task_id) or task  # (the copy notes are written to)
        next_id = chains.next_of(task.history)
        if next_id is not None:
            self._follow_id(next_id, fn)
            return
        stopped = chains.stop_of(task.history)
        if stopped is not None:
            fn(stand_in(task, *stopped))
        else:  # not started yet: a refusal is being retried, or a restart will start it
            self._waiting.setdefault(task.task_id, []).append(fn)

    def _answer_waiting(self, task: Task) -> None:
        for fn in self._waiting.pop(task.task_id, ()):
            try:
                self.follow(task, fn)
            except Exception:  # one waiter's bug must not cost the others
                log.exception("a follower of task %s's chain failed", task.task_id)

    def _follow_id(self, task_id: str, fn: Watcher) -> None:
        if self.gateway.watch(task_id, fn):
            return
        found = self.gateway.find(task_id)
        if found is not None and found.terminal:
            fn(found)
        else:
            self.crew.spawn(self._read(task_id, fn), name=f"chain-follow-{task_id}")

    async def _read(self, task_id: str, fn: Watcher) -> None:
        """A next step only the store knows of: read it; an unfinished one is live soon
        (being resumed), so look again a few times."""
        for _ in range(100):
            task = await self.gateway.task(task_id)
            if task is not None and task.terminal:
                fn(task)
                return
            if self.gateway.watch(task_id, fn):
                return
            await self.gateway.clock.sleep(0.05)
        log.warning("chain step %s is neither live nor finished: its follower gives up",
                    task_id)

    # ------------------------------------------------------------ after a restart

    async def resume(self, since: float) -> int:
        """Start the next step of every chain task (created since ``since``: idempotency
        keys live that long) that succeeded without one (a crash came in between). How
        many were started."""
        started = self.carry_on(await self.gateway.store.chained(since))
        if started:
            log.info("resumed %d chain(s) whose next step had not started", started)
        return started

    def carry_on(self, tasks: list[Task]) -> int:
        """Start the next step of each of ``tasks`` that succeeded with steps left and has
        no note of a next step or of a stop (as read from the store, or as kept here): how
        many were started. The step's derived key makes a second start, here or on another
        node, the same task (its note then names the first)."""
        started = 0
        for stored in tasks:
            task = self.gateway.find(stored.task_id) or stored
            if task.state is S.SUCCEEDED and task.envelope.then and \
                    chains.next_of(task.history) is None and \
                    chains.stop_of(task.history) is None:
                self._next(task)
                started += 1
        return started

    async def stop(self) -> None:
        await self.crew.stop()
        self._waiting.clear()


def stand_in(task: Task, code: str, message: str) -> Task:
    """A failed task standing for the next step of ``task`` that never started: what its
    chain's waiters are answered with (its error names that step)."""
    env = task.envelope
    place = chains.place(task.task_id, env.then, env.link)
    after = Link(place.head, place.step + 1, place.of)
    error: Mapping[str, Any] = {"code": code, "message": message,
                                "details": {"chain": after.to_json()}}
    return Task(envelope=env, state=S.FAILED, error=dict(error), updated_at=task.updated_at)
