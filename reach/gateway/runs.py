"""A task's life carried out by callbacks: the common path creates no ``asyncio.Task``.

A driver's coroutine (``Driver.carry``) awaits each request of a life (reach.core.life). Most
calls need no waiting but the attempt's own: a free agent is picked at once, the attempt's
commit completes, then its outcome comes. A ``Run`` carries such a life out from callbacks
on those two futures, with the dispatcher's own steps (``open``, ``send``, ``close``). A task
that must wait for a free slot waits in the slot queue as a ticket and a deadline, called back
when a slot opens or its time is over: a queue of thousands holds no coroutine. A backoff or a
wait for agents is a deadline too (and, for agents, a place among ``Driver.wake``'s waiters).
Only a hedged attempt, two attempts in flight at once, hands the life over to a coroutine,
owned by the same crew under the same name, so a stop, a let-go or a forgotten insert reaches
it either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from reach.core.life import Command, Dispatch, Event, Life, Pick, Sleep, WaitAgents, Woke
from reach.core.policy import Verdict
from reach.core.tasks import Attempt, Task
from reach.gateway.book import TaskBook
from reach.gateway.crew import Crew
from reach.gateway.dispatch import Dispatcher, Try
from reach.gateway.slots import Queueing, SlotQueue, Ticket
from reach.ports import Clock, TaskStore, Timer

WOKE = Woke()  # the answer to a wait that is over (one for every run and coroutine)


class _Wait:
    """What one wait of a run holds, so that leaving it leaves nothing behind: its deadline,
    its place in the slot queue, its place among the agents' waiters."""

    __slots__ = ("timer", "ticket", "waker")

    def __init__(self) -> None:
        self.timer: Timer | None = None
        self.ticket: Ticket | None = None
        self.waker: Callable[[], None] | None = None


class Carrier(Protocol):
    """What a run needs of the driver (reach.gateway.driver implements it)."""

    clock: Clock
    store: TaskStore
    book: TaskBook
    dispatch: Dispatcher
    crew: Crew
    slots: SlotQueue

    def pick_now(self, task: Task, exclude: frozenset[str]) -> Event | None: ...

    def queueing(self, task: Task, pick: Pick) -> Queueing: ...

    def slot_event(self, task: Task, q: Queueing) -> Event | None: ...

    def answer_now(self, task: Task, command: Command) -> Event | None: ...

    def apply_all(self, task: Task, commands: list[Command]) -> Command | None: ...

    def ended(self, life: Life, verdict: Verdict, payload: Any, attempt: Attempt,
              record: Any) -> Event: ...

    def carry(self, life: Life, commands: list[Command]) -> Coroutine[Any, Any, None]: ...

    def fail(self, task: Task, exc: Exception) -> None: ...

    def on_agents(self, fn: Callable[[], None], capability: str) -> None: ...

    def off_agents(self, fn: Callable[[], None], capability: str) -> None: ...


class Run:
    """One life carried out by callbacks until it ends, is cancelled or is handed over."""

    __slots__ = ("driver", "life", "name", "attempt", "handed", "stopped", "queueing",
                 "wait")

    def __init__(self, driver: Carrier, life: Life) -> None:
        self.driver = driver
        self.life = life
        self.name = f"task-{life.task.task_id}"
        self.attempt: Try | None = None  # the attempt in flight
        self.handed: asyncio.Task[None] | None = None  # the coroutine it was handed to
        self.stopped = False
        self.queueing: Queueing | None = None  # a pick waiting for a slot, across wake-ups
        self.wait: _Wait | None = None  # the wait in progress (a slot, agents, a backoff)

    def start(self) -> None:
        if self.stopped:
            return
        clock = self.driver.clock
        try:
            commands = self.life.start(clock.now(), clock.wall())
        except Exception as exc:  # a bug here must not leave a caller waiting forever
            self._failed(exc)
            return
        self._carry(commands)

    def cancel(self) -> None:
        """Stop carrying the life out (the coordinator stops or lets the task go, or its
        insert failed): an attempt in flight is abandoned, the task stays unfinished."""
        self.stopped = True
        if self.handed is not None:
            self.handed.cancel()
            return
        self._end_wait()
        self._abandon()
        self._done()

    # ------------------------------------------------------------ carrying commands out

    def _carry(self, commands: list[Command]) -> None:
        driver, life = self.driver, self.life
        try:
            while (request := driver.apply_all(life.task, commands)) is not None:
                event = self._answer(request)
                if event is None:  # a callback or a coroutine carries on
                    return
                commands = life.on(event, driver.clock.now())
        except Exception as exc:
            self._failed(exc)
            return
        self._done()  # the life ended

    def _answer(self, request: Command) -> Event | None:
        """The answer to ``request`` now, or None when it comes later (an attempt) or the
        life was handed to a coroutine."""
        driver, task = self.driver, self.life.task
        if isinstance(request, Dispatch):
            dispatch = driver.dispatch
            if dispatch.hedge_after(task, request.record) is not None:
                self._hand_over(request)
                return None
            self.attempt = dispatch.open(task, request.record, request.deadline, request.kept)
            driver.book.then(task.task_id, driver.store.persist(task), self._committed)
            return None
        if isinstance(request, Pick):
            event = driver.pick_now(task, request.exclude)
            if event is None:  # it may have to wait for a slot
                q = driver.queueing(task, request)
                event = driver.slot_event(task, q)
                if event is None:
                    self.queueing = q
                    self._queue()
            return event
        if isinstance(request, (Sleep, WaitAgents)):
            if isinstance(request, WaitAgents) and request.seconds <= 0:
                return WOKE  # no time to wait: look again at once
            self._sleep(request.seconds, isinstance(request, WaitAgents))
            return None
        event = driver.answer_now(task, request)
        assert event is not None, request  # (every other request is answered at once)
        return event

    # ------------------------------------------------------------ waits

    def _sleep(self, seconds: float, for_agents: bool) -> None:
        """Wake after ``seconds`` (a backoff, a breaker or recovery wait), or as soon as the
        agents change when it waits for them (``Driver.wake``)."""
        driver = self.driver
        w = self.wait = _Wait()

        def over() -> None:
            if self.wait is w:  # (not a wait this run has since left)
                self._end_wait()
                self._go_on(WOKE)

        w.timer = driver.dispatch.deadlines.call_at(driver.clock.now() + max(0.0, seconds), over)
        if for_agents:
            w.waker = over
            driver.on_agents(over, self.life.task.envelope.capability)

    def _queue(self) -> None:
        """Wait in the slot queue until a slot opens for this task or its wait is over."""
        driver, env, q = self.driver, self.life.task.envelope, self.queueing
        assert q is not None
        loop = asyncio.get_running_loop()
        w = self.wait = _Wait()

        def turn() -> None:
            if self.wait is w:  # woken, or out of time: try the pick again
                self._end_wait()
                self._slot_turn()

        def woken() -> None:
            # Woken from inside another attempt's end (a slot freed, an agent back): this
            # task's pick runs at the next turn, as a woken coroutine's did, not in the middle.
            loop.call_soon(turn)

        w.ticket = driver.slots.enter(env.capability, env.priority, q.since, env.caller,
                                      woken)
        w.timer = driver.dispatch.deadlines.call_at(driver.clock.now() + q.left, turn)

    def _end_wait(self) -> None:
        """Leave the wait in progress (over, stopped or failed): nothing of it stays armed,
        queued or counted."""
        w, self.wait = self.wait, None
        if w is None:
            return
        if w.timer is not None:
            w.timer.cancel()
        if w.ticket is not None:
            w.ticket.cancel()  # (out of time: no later wake is spent on it)
            env = self.life.task.envelope
            self.driver.slots.leave(env.capability, env.caller, w.ticket.woken)
        if w.waker is not None:
            self.driver.off_agents(w.waker, self.life.task.envelope.capability)

    def _slot_turn(self) -> None:
        """Try the pick again; wait again if it lost the slot to another."""
        q = self.queueing
        assert q is not None
        try:
            event = self.driver.slot_event(self.life.task, q)
        except Exception as exc:
            self._failed(exc)
            return
        if event is None:
            self._queue()
            return
        self.queueing = None
        self._go_on(event)

    def _go_on(self, event: Event) -> None:
        """Feed the answer that ended a wait to the life, and carry on."""
        try:
            commands = self.life.on(event, self.driver.clock.now())
        except Exception as exc:
            self._failed(exc)
            return
        self._carry(commands)

    def _committed(self, commit: asyncio.Future[None]) -> None:
        """The attempt's commit is done: send it (an insert that failed cancelled the run
        first, from the gateway's own callback)."""
        t = self.attempt
        if t is None or self.stopped:
            return
        if commit.cancelled():  # the store is closing: as a stop, the task stays unfinished
            self._abandon()
            self._done()
            return
        try:
            commit.result()
            self.driver.dispatch.send(t)
        except Exception as exc:
            self._failed(exc)
            return
        t.delivery.on_end = self._delivered
        if t.delivery.outcome is not None:  # (ended already: a link that refused it)
            asyncio.get_running_loop().call_soon(self._delivered, *t.delivery.outcome)

    def _delivered(self, kind: str, payload: Any) -> None:
        t = self.attempt
        if t is None or self.stopped:
            return
        self.attempt = None
        driver = self.driver
        try:
            verdict, payload, attempt = driver.dispatch.close(t, kind, payload)
            commands = self.life.on(driver.ended(self.life, verdict, payload, attempt,
                                                 t.record), driver.clock.now())
        except Exception as exc:
            self._failed(exc)
            return
        self._carry(commands)

    def _hand_over(self, request: Command) -> None:
        driver = self.driver
        self.handed = driver.crew.spawn(driver.carry(self.life, [request]), name=self.name)
        self._done()  # (after the spawn: the crew never looks idle in between)

    # ------------------------------------------------------------ the end

    def _abandon(self) -> None:
        t, self.attempt = self.attempt, None
        if t is not None:
            self.driver.dispatch.abandon(t)

    def _failed(self, exc: Exception) -> None:
        self._end_wait()
        self._abandon()
        self.driver.fail(self.life.task, exc)
        self._done()

    def _done(self) -> None:
        self.driver.crew.release(self.name, self)

