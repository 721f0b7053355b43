"""A task's life carried out by callbacks: the common path creates no ``asyncio.Task``.

A driver's coroutine (``Driver.carry``) awaits each request of a life (reach.core.life). Most
calls need no waiting but the attempt's own: a free agent is picked at once, the attempt's
commit completes, then its outcome comes. A ``Run`` carries such a life out from callbacks
on those two futures, with the dispatcher's own steps (``open``, ``send``, ``close``). A task
that must wait for a free slot waits in the slot queue as a ticket and a deadline, called back
when a slot opens or its time is over: a queue of thousands holds no coroutine. The first
request that must wait in a coroutine (for agents, a backoff, a hedged attempt) hands the life
over to one, owned by the same crew under the same name, so a stop, a let-go or a forgotten
insert reaches it either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from reach.core.life import Command, Dispatch, Event, Life, Pick
from reach.core.policy import Verdict
from reach.core.tasks import Attempt, Task
from reach.gateway.book import TaskBook
from reach.gateway.crew import Crew
from reach.gateway.dispatch import Dispatcher, Try
from reach.gateway.slots import Queueing, SlotQueue, Ticket
from reach.ports import Clock, TaskStore, Timer


class Carrier(Protocol):
    """What a run needs of the driver (reach.gateway.driver implements it)."""

    clock: Clock
    store: TaskStore
    book: TaskBook
    dispatch: Dispatcher
    crew: Crew
    slots: SlotQueue

    def pick_now(self, task: Task, exclude: frozenset[str]) -> Event | None: ...

    def queueing(self, task: Task, exclude: frozenset[str],
                 deadline: float | None) -> Queueing: ...

    def slot_event(self, task: Task, q: Queueing) -> Event | None: ...

    def answer_now(self, task: Task, command: Command) -> Event | None: ...

    def apply_all(self, task: Task, commands: list[Command]) -> Command | None: ...

    def ended(self, life: Life, verdict: Verdict, payload: Any, attempt: Attempt,
              record: Any) -> Event: ...

    def carry(self, life: Life, commands: list[Command]) -> Coroutine[Any, Any, None]: ...

    def fail(self, task: Task, exc: Exception) -> None: ...


class Run:
    """One life carried out by callbacks until it ends, is cancelled or is handed over."""

    __slots__ = ("driver", "life", "name", "attempt", "handed", "stopped", "queueing",
                 "ticket", "timer")

    def __init__(self, driver: Carrier, life: Life) -> None:
        self.driver = driver
        self.life = life
        self.name = f"task-{life.task.task_id}"
        self.attempt: Try | None = None  # the attempt in flight
        self.handed: asyncio.Task[None] | None = None  # the coroutine it was handed to
        self.stopped = False
        self.queueing: Queueing | None = None  # a pick waiting for a slot, across wake-ups
        self.ticket: Ticket | None = None  # its place in the slot queue, while it waits
        self.timer: Timer | None = None  # and the end of that wait

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
        self._leave_queue()
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
                q = driver.queueing(task, request.exclude, request.deadline)
                event = driver.slot_event(task, q)
                if event is None:
                    self.queueing = q
                    self._queue()
            return event
        event = driver.answer_now(task, request)
        if event is None:  # a wait: a coroutine's
            self._hand_over(request)
        return event

    # ------------------------------------------------------------ waiting for a slot

    def _queue(self) -> None:
        """Wait in the slot queue until a slot opens for this task or its wait is over."""
        driver, env, q = self.driver, self.life.task.envelope, self.queueing
        assert q is not None
        loop = asyncio.get_running_loop()

        def woken() -> None:
            # Woken from inside another attempt's end (a slot freed, an agent back): this
            # task's pick runs at the next turn, as a woken coroutine's did, not in the middle.
            loop.call_soon(self._slot_turn)

        self.ticket = driver.slots.enter(env.capability, env.priority, q.since, env.caller,
                                         woken)
        self.timer = driver.clock.call_at(driver.clock.now() + q.left, self._slot_turn)

    def _leave_queue(self) -> bool:
        """Leave the slot queue (woken, out of time, or stopped); False if not in it."""
        ticket, timer = self.ticket, self.timer
        if ticket is None or timer is None:
            return False
        self.ticket = self.timer = None
        ticket.cancel()  # (out of time: no later wake is spent on it)
        timer.cancel()
        env = self.life.task.envelope
        self.driver.slots.leave(env.capability, env.caller)
        return True

    def _slot_turn(self) -> None:
        """Woken, or its wait is over: try the pick again (and wait again if it lost)."""
        if self.stopped or not self._leave_queue():
            return
        driver, q = self.driver, self.queueing
        assert q is not None
        try:
            event = driver.slot_event(self.life.task, q)
            if event is None:
                self._queue()
                return
            self.queueing = None
            commands = self.life.on(event, driver.clock.now())
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
        t.delivery.fut.add_done_callback(self._delivered)

    def _delivered(self, outcome: asyncio.Future[tuple[str, object]]) -> None:
        t = self.attempt
        if t is None or self.stopped:
            return
        self.attempt = None
        driver = self.driver
        try:
            kind, payload = outcome.result()
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
        self._leave_queue()
        self._abandon()
        self.driver.fail(self.life.task, exc)
        self._done()

    def _done(self) -> None:
        self.driver.crew.release(self.name, self)

