"""One task's life between its accept and its end, as a pure machine: events in, commands out.

The gateway's driver used to hold this as a 110-line ``while True`` whose state lived in
local variables (the deadline, the tries, the agent a lost attempt must go back to, the
breaker-wait allowance, the agents already tried). Here that state is a plain object and
every decision a transition: ``Life.start(now, wall)`` and ``Life.on(event, now)`` return the
commands to carry out in order; the last one may be a *request* (``Pick``, ``LookFor``,
``Dispatch``, ``WaitAgents``, ``Sleep``, ``Charge``) whose answer is the next event. No
clock is read, no timer armed, nothing awaited: ``reach.gateway.driver`` carries the commands
out, and a test drives the machine with plain calls (h11, websockets' ``protocol.py``).

What an attempt's end *means* is ``reach.core.policy``'s (``classify``, ``after_attempt``,
``when_unavailable``); one attempt's deadlines are ``reach.core.flight``'s. This machine
strings them together: back to the agent a restart or a lost peer left holding the work
(only its key cache knows the key), fail-over, backoff within the retry budget, waits for
agents or breakers that spend no hop, the task's deadline, and the end.

Facts about the registry ride on the events (the machine never reads it): a ``NoneFits``
brings how long a resting breaker would keep the task waiting; an ``Ended`` brings whether
the capability is idempotent and, for an attempt never delivered, whether an untried agent
is left (``Ended.others_left`` is read only then, so the gateway looks only then).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from reach.core import policy
from reach.core.agents import AgentRecord
from reach.core.backoff import Backoff
from reach.core.ends import attempt_error, maybe_ran
from reach.core.life_events import (
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
    Woke,
)
from reach.core.tasks import Attempt, Outcome, Task, TaskState
from reach.errors import ReachTimeout, Rejected, Unavailable

__all__ = ["REQUESTS", "AgentIs", "Budget", "Charge", "Command", "CountRejected", "CountRetry",
           "Dispatch", "Ended", "Event", "Finish", "Life", "LookFor", "Move", "NoneFits", "Pick",
           "Picked", "Refused", "Rules", "Sleep", "Update", "WaitAgents", "WaitedOut", "Woke"]

S = TaskState
RESUMED = "resumed"  # the history note ``Gateway.resume`` leaves on a task it takes up again


class Rules(Protocol):
    """The settings a life reads (``reach.config.Settings`` has them)."""

    @property
    def recovery_grace(self) -> float: ...
    @property
    def breaker_open_for(self) -> float: ...
    @property
    def backoff(self) -> Backoff: ...
    @property
    def retry_budget(self) -> float: ...
    @property
    def retry_budget_window(self) -> float: ...
    @property
    def max_wait(self) -> float: ...


_GO_BACK = policy.GoBack()
_UPDATE = Update()
_CHARGE = Charge()
_REJECTED = CountRejected()
# What a ``Woke`` resumes (the request it answers)
_POLL, _BREAKER, _BACK, _BACKOFF = "poll", "breaker", "back", "backoff"


# ---------------------------------------------------------------- the machine


@dataclass(slots=True)
class Life:
    """The life of ``task`` from its accept (or resume) to its end.

    ``deadline``, ``recovering_until`` and ``back_until`` are the clock's monotonic seconds;
    ``ended`` is set by the command that ends the task (no event after it means anything)."""

    task: Task
    rules: Rules
    rng: random.Random
    tries: policy.Tries = field(init=False)
    deadline: float | None = None
    kept: float | None = None  # a resumed task's completion timeout, from before the restart
    lost: Attempt | None = None  # the attempt whose agent the task must go back to
    recovering_until: float = 0.0
    # How long this task may wait for resting breakers to let work through instead of
    # spending a retry on "no healthy agent" (policy.breaker_wait). A wait on a half-open
    # probe already out is not spent from it: the probe is an attempt with its own timeout,
    # its verdict wakes the waiters, and under load it can outlast the open period.
    allowance: float = 0.0
    exclude: set[str] = field(default_factory=set)  # agents tried (fail-over skips them)
    back_until: float | None = None  # going back to an agent a peer lost, until then
    ended: bool = False
    waiting: str | None = None  # which wait a ``Woke`` ends
    since: float = 0.0  # when a breaker wait began
    going_back: Attempt | None = None  # a lost attempt to go back to once the poll is over
    # The first attempt lost without proof that it never arrived (its agent may have it): work
    # that is not idempotent goes to that agent's process alone from then on.
    held: Attempt | None = None
    retry: policy.Retry | None = None  # a retry waiting for the budget's answer
    why: str = ""  # that retry's cause
    # A submit's backlog: it waits its turn for a slot or an agent until then (and never past
    # ``deadline``); None for a task with a ``queue_wait`` of its own, which waits that long
    # for a slot from each pick.
    backlog_until: float | None = None
    waits_for_agents: float | None = None  # until when it may wait for a routable agent

    def __post_init__(self) -> None:
        self.tries = policy.Tries(self.task.envelope.max_retries)
        self.allowance = self.rules.breaker_open_for

    # ------------------------------------------------------------ entry points

    def start(self, now: float, wall: float) -> list[Command]:
        """The first commands of a task just accepted, or resumed after a restart (its
        history ends with the ``resumed`` note). ``wall``: the wall clock now, which a
        resumed task's deadline is worked out from (it runs from the submit)."""
        task = self.task
        env = task.envelope
        if env.timeout is not None:
            self.deadline = now + env.timeout
        if env.queue_wait is None:  # (a resumed task's runs from its submit: below)
            self.backlog_until = self.waits_for_agents = now + self.rules.max_wait
        elif not env.fail_fast:
            self.waits_for_agents = now + env.queue_wait
        history = task.history
        if not history or history[-1][2] != RESUMED:
            return self._next(now)
        # A restart changes none of the task's budget: its deadline and max_wait run from its
        # submit, its tries so far count, and it keeps its completion timeout (the latency
        # history behind it is gone with the old process; a caller's deadline sets it
        # otherwise). (A replay is new work: its max_wait runs from now.)
        if self.backlog_until is not None:
            waited = wall - env.created_at
            self.backlog_until = self.waits_for_agents = \
                self.backlog_until - (waited if waited > 0 else 0.0)
        if env.timeout is not None:
            self.deadline = now + policy.time_left(env.created_at, env.timeout, wall)
        else:
            self.kept = policy.kept_timeout(a.timeout for a in task.attempts)
        self.tries = policy.resumed_tries(env.max_retries, history)
        self.recovering_until = now + self.rules.recovery_grace
        last = task.attempts[-1] if task.attempts else None
        if last is None or last.outcome != Outcome.LOST:
            return self._next(now)
        # Interrupted by the crash: it goes back to the agent that was running it (only that
        # agent's cache knows the key; another would run it a second time). Sending it again
        # is a retry, counted like any other, and none is left after the last one.
        if not self.tries.may_retry():
            return self._end(Finish(S.DEAD, error=Unavailable(
                f"the coordinator restarted during attempt {last.number} of "
                f"{env.capability!r} at agent {last.agent!r}, its last (max_retries "
                f"{env.max_retries}); not sent again (it may have run): check, then replay it",
                agent_id=last.agent_id)))
        self.tries.retries += 1
        self.lost = self.held = last
        return [Move(S.RETRYING, f"retry {self.tries.retries}: the coordinator restarted "
                                 f"during attempt {last.number}"), *self._next(now)]

    def on(self, event: Event, now: float) -> list[Command]:
        """The commands that follow ``event`` (the answer to the last request)."""
        if self.ended:
            return []
        if isinstance(event, Ended):
            return self._ended(event, now)
        if isinstance(event, Picked):
            return self._dispatch(event.record)
        if isinstance(event, Woke):
            return self._woke(now)
        if isinstance(event, NoneFits):
            return self._none_fits(event, now)
        if isinstance(event, Refused):
            end = self._end(Finish(S.FAILED, error=event.error))
            return [_REJECTED, *end] if isinstance(event.error, Rejected) else end
        if isinstance(event, WaitedOut):
            return self._end(Finish(S.DEAD, error=event.error))
        if isinstance(event, AgentIs):
            return self._agent_is(event, now)
        if isinstance(event, Budget):
            return self._budget(event.ok, now)
        raise TypeError(f"not an event of a task's life: {event!r}")

    # ------------------------------------------------------------ steps

    def _next(self, now: float) -> list[Command]:
        """The top of the loop: the deadline, then the agent to go back to, else a pick."""
        if self.deadline is not None and now >= self.deadline:
            env = self.task.envelope
            return self._end(Finish(S.DEAD, error=ReachTimeout(
                f"{env.capability!r} did not complete within {env.timeout}s")))
        if self.lost is not None:
            return [LookFor(self.lost.agent_id)]
        return [Pick(frozenset(self.exclude), self.deadline, self.backlog_until)]

    def _dispatch(self, record: AgentRecord) -> list[Command]:
        # A hop is a dispatch (as resumed_tries counts them): a wait for agents, a breaker or
        # a lost agent's return spends none.
        self.tries.hops += 1
        return [Dispatch(record, self.deadline, self.kept)]

    def _end(self, finish: Finish) -> list[Command]:
        self.ended = True
        return [finish]

    def _wait(self, waiting: str, seconds: float) -> list[Command]:
        self.waiting = waiting
        return [WaitAgents(seconds)]

    def _woke(self, now: float) -> list[Command]:
        waiting, self.waiting = self.waiting, None
        if waiting == _BREAKER:
            self.allowance -= now - self.since
        elif waiting == _BACK:
            self.lost, self.recovering_until = self.going_back, self.back_until or 0.0
        elif waiting == _BACKOFF:
            assert self.retry is not None
            if self.retry.anywhere:
                self.exclude.clear()
        return self._next(now)

    def _agent_is(self, event: AgentIs, now: float) -> list[Command]:
        """A task going back to the agent that was running it, once that agent is back."""
        lost = self.lost
        assert lost is not None
        env = self.task.envelope
        found = event.found
        if found is not None and lost.instance is not None and found.instance != lost.instance:
            # Back under its name, but as a new process: the key cache that knew this task is
            # gone with the old one, and the work may have been done.
            why = (f"agent {found.name!r} restarted while it was running {env.capability!r} "
                   f"and the coordinator was down; it may have done the work, and its new "
                   f"process cannot tell")
        elif found is None or not event.ready:
            left = self.recovering_until - now
            if left > 0:
                return self._wait(_POLL, min(policy.RECOVERY_POLL, left))
            why = (f"the agent that was running {env.capability!r} did not come back "
                   f"within {self.rules.recovery_grace}s")
        else:
            self.lost = None
            return self._dispatch(found)
        self.lost = None
        if not event.idempotent:
            return self._end(Finish(S.DEAD, error=Unavailable(
                f"{why}; not re-run elsewhere because the capability is not idempotent "
                f"(check, then replay it if it did not run)", agent_id=lost.agent_id)))
        return self._next(now)  # idempotent: safe to run again anywhere

    def _none_fits(self, event: NoneFits, now: float) -> list[Command]:
        env = self.task.envelope
        if env.fallback and self.recovering_until <= now:
            return self._end(Finish(S.DEAD, error=event.error))  # the fallback answers now
        spent = self.allowance <= 0  # (spent: a breaker is not worth waiting for)
        step = policy.when_unavailable(
            self.tries, recovering_for=self.recovering_until - now,
            breaker_wait=None if spent else event.breaker_wait,
            breaker_allowance=self.allowance,
            deadline_left=None if self.deadline is None else self.deadline - now)
        if isinstance(step, policy.Wait):
            self.since = now
            breaker = step.for_breaker and not spent and not event.probing
            return self._wait(_BREAKER if breaker else _POLL, step.seconds)
        if self.waits_for_agents is not None:
            return self._wait_for_agents(event, now)
        if isinstance(step, policy.Retry):
            return self._retry(step, str(event.error), now)
        return self._end(Finish(S.DEAD, error=event.error))

    def _wait_for_agents(self, event: NoneFits, now: float) -> list[Command]:
        """A task that may wait (a submit, or a call that asked to) waits for an agent in
        state ``queued`` instead of spending retries, until its wait or deadline is over;
        then it ends dead with the reason, a dead letter to replay."""
        assert self.waits_for_agents is not None
        until = self.waits_for_agents
        if self.deadline is not None:
            until = min(until, self.deadline)
        left = until - now
        if left <= 0:
            env = self.task.envelope
            return self._end(Finish(S.DEAD, error=Unavailable(
                f"no agent could take {env.capability!r} while the task waited for one "
                f"({event.error}); replay it from the dead letters once one can",
                capability=env.capability)))
        wait = self._wait(_POLL, min(left, policy.AGENT_POLL))
        if self.task.state is S.QUEUED:
            return wait
        return [Move(S.QUEUED, "waiting for an agent"), *wait]

    def _ended(self, event: Ended, now: float) -> list[Command]:
        verdict, attempt, record = event.verdict, event.attempt, event.record
        if verdict.outcome in (Outcome.LOST, Outcome.UNDELIVERED) and not verdict.full and \
                record.node is not None and attempt.instance is not None and \
                (self.back_until is None or now < self.back_until):
            # Lost at an agent another node holds: that node went away with the work (its peer
            # link ended, the agent's ack may have died with it) or lost the agent's connection
            # (it was fenced: the agent moves to another node). The agent may have run it; only
            # its key cache knows the key, so the task goes back to it, as a resumed one does
            # (for up to recovery_grace from the first loss; at once elsewhere if it comes back
            # as a new process), instead of running a second time at another agent.
            return self._go_back(attempt, now)
        self.exclude.add(record.agent_id)
        step = policy.after_attempt(verdict, self.tries, idempotent=event.idempotent,
                                    others_left=event.others_left)
        held = self.held
        if held is not None and not event.idempotent and \
                isinstance(step, (policy.FailOver, policy.Retry)):
            # An earlier attempt may still be running where it was lost without proof (this
            # one, sent back there, never arrived): that agent alone may have it, never a
            # second one (at most once).
            step, attempt = _GO_BACK, held
        if isinstance(step, policy.Finish):
            if step.state is S.SUCCEEDED:
                self.ended = True  # answered at once, as the result came (Gateway.answered)
                return [] if self.task.terminal else [Finish(S.SUCCEEDED, result=event.payload)]
            if step.state is S.FAILED:
                return self._end(Finish(S.FAILED, wire_error=event.payload))
            return self._end(Finish(S.DEAD, error=attempt_error(
                self.task.envelope, attempt, event.payload, record, step.retryable)))
        if isinstance(step, policy.GoBack):
            if attempt.instance is None or \
                    (self.back_until is not None and now >= self.back_until):
                return self._end(Finish(S.DEAD, error=maybe_ran(self.task.envelope, attempt)))
            # Its link went away before it acknowledged: back to that agent alone, once it
            # reconnects as the same process (its key cache answers).
            return self._go_back(attempt, now)
        if isinstance(step, policy.FailOver):
            if step.free:  # the agent was full at its node: a wait, not a hop
                self.tries.hops -= 1
            return self._next(now)
        assert isinstance(step, policy.Retry)
        return self._retry(step, attempt.error or verdict.outcome, now)

    def _go_back(self, attempt: Attempt, now: float) -> list[Command]:
        """Back to the agent of ``attempt`` alone, for up to ``recovery_grace`` from the first
        loss; a loss again on the way back (the news that the agent moved has not come yet)
        first waits for the agents to change."""
        if self.held is None:
            self.held = attempt
        if self.back_until is None:
            self.back_until = now + self.rules.recovery_grace
            self.lost, self.recovering_until = attempt, self.back_until
            return self._next(now)
        self.going_back = attempt
        return self._wait(_BACK, policy.RECOVERY_POLL)

    def _retry(self, step: policy.Retry, why: str, now: float) -> list[Command]:
        """Count the retry; one that re-sends work (``step.charge``) first asks the budget."""
        self.tries.retries += 1
        self.retry, self.why = step, why
        if step.charge:
            return [_CHARGE]
        return self._backoff(now)

    def _budget(self, ok: bool, now: float) -> list[Command]:
        if not ok:
            env, r = self.task.envelope, self.rules
            return self._end(Finish(S.DEAD, error=Unavailable(
                f"{env.capability!r} not retried: the coordinator's retry budget "
                f"({r.retry_budget:.0%} of first attempts over {r.retry_budget_window:.0f}s) "
                f"is spent, many tasks are failing at once; last failure: {self.why}. Replay "
                f"it from the dead letters once the cause is fixed",
                capability=env.capability)))
        # The metric counts retries that send work again, as the budget does.
        attempts = self.task.attempts
        return [CountRetry(attempts[-1].agent if attempts else None), *self._backoff(now)]

    def _backoff(self, now: float) -> list[Command]:
        delay = policy.retry_delay(self.rules.backoff, self.tries.retries, self.rng,
                                   None if self.deadline is None else self.deadline - now)
        self.waiting = _BACKOFF
        return [Move(S.RETRYING, f"retry {self.tries.retries} in {delay * 1000:.0f} ms: "
                                 f"{self.why}"), _UPDATE, Sleep(delay)]
