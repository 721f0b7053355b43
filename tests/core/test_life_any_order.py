"""A task's life (reach.core.life), property-tested alone: Hypothesis answers every request
the machine makes with any answer a gateway could give (any agent, any attempt's end, agents
coming back as the same process or a new one, budgets that refuse, time jumping), and after
every step what the machine promises must hold:

- it always says what it waits for: a life that has not ended asks for exactly one thing,
  last, and a life that ended asks for nothing more and ends once;
- it succeeds only on a result, and never retries past ``max_retries``;
- work that is not idempotent is never handed to a second agent, or a new process of the same
  one, once an earlier one may have run it (at most once; DESIGN.md).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_life import Rules

from reach.core import policy
from reach.core.agents import AgentRecord
from reach.core.life import (
    AgentIs,
    Budget,
    Charge,
    Command,
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
    WaitAgents,
    WaitedOut,
    Woke,
)
from reach.core.tasks import Attempt, Envelope, Outcome, TaskState, new_task
from reach.errors import ReachTimeout, Rejected, Unavailable

REQUESTS = (Pick, LookFor, Dispatch, WaitAgents, Sleep, Charge)
# (A loss is drawn more often: it is where at most once can break.)
KINDS = ("lost", "ok", "error", "answer", "lost", "unsent", "undelivered", "timeout", "full",
         "lost")


def agents() -> st.SearchStrategy[AgentRecord]:
    return st.builds(lambda name, instance, node: AgentRecord(
        agent_id=name, name=name, version="1", max_concurrency=1, capabilities={},
        instance=instance, node=node),
        st.sampled_from("abc"), st.sampled_from(["p1", None, "p1", "p2"]),
        st.sampled_from([None, None, "n2"]))


def answer(data: st.DataObject, life: Life, request: Command, idempotent: bool) -> Event:
    """Any answer a gateway could give to ``request``."""
    if isinstance(request, Pick):
        picked = agents().map(Picked)
        return data.draw(st.one_of(
            picked, picked, picked,
            st.builds(NoneFits, st.just(Unavailable("none")),
                      st.sampled_from([None, 0.0, 0.5, 4.0]), st.booleans()),
            st.just(Refused(Rejected("full"))),
            st.just(WaitedOut(ReachTimeout("waited out")))))
    if isinstance(request, Dispatch):
        record = request.record
        attempt = Attempt(number=len(life.task.attempts) + 1, agent_id=record.agent_id,
                          agent=record.name, started_at=0.0, instance=record.instance)
        life.task.attempts.append(attempt)
        kind = data.draw(st.sampled_from(KINDS))
        payload: Any = None
        if kind == "error":
            payload = {"message": "boom"}
        elif kind == "answer":
            kind, payload = "error", {"message": "no", "details": {"answer": True}}
        verdict = policy.classify(kind, payload, acked=data.draw(st.booleans()),
                                  caller_bound=False)
        attempt.outcome, attempt.error = verdict.name, verdict.error
        return Ended(verdict, payload, attempt, record, idempotent, data.draw(st.booleans()))
    if isinstance(request, LookFor):
        found = data.draw(st.one_of(st.none(), agents().map(
            lambda r: AgentRecord(agent_id=request.agent_id, name=request.agent_id,
                                  version="1", max_concurrency=1, capabilities={},
                                  instance=r.instance, node=r.node))))
        return AgentIs(found, data.draw(st.booleans()), idempotent)
    if isinstance(request, Charge):
        return Budget(data.draw(st.booleans()))
    return Woke()


@settings(max_examples=500, deadline=None)
@given(data=st.data(), idempotent=st.booleans(), max_retries=st.integers(0, 3),
       timeout=st.sampled_from([None, 2.0, 30.0]),
       kind=st.sampled_from(["submit", "call", "call that waits"]))
def test_any_answers_keep_the_promises_of_a_task_s_life(
        data: st.DataObject, idempotent: bool, max_retries: int, timeout: float | None,
        kind: str) -> None:
    task = new_task(Envelope(task_id="t", trace_id="tr", capability="c", params={},
                             caller="me", idempotency_key="k", max_retries=max_retries,
                             timeout=timeout, queue_wait={"submit": None}.get(kind, 0.2),
                             fail_fast=kind == "call"), 0.0)
    life = Life(task, Rules(max_wait=6.0), random.Random(0))
    now = 0.0
    commands = life.start(now, now)
    finishes = retries = 0
    last: Event | None = None
    may_have_run: set[tuple[str, str | None]] = set()  # (agent, process) that may have it
    for _ in range(60):
        requests = [c for c in commands if isinstance(c, REQUESTS)]
        for command in commands:
            if isinstance(command, Finish):
                finishes += 1
                if command.state is TaskState.SUCCEEDED:
                    assert isinstance(last, Ended) and last.verdict.outcome is Outcome.OK
            elif isinstance(command, Move) and command.state is TaskState.RETRYING:
                retries += 1
            elif isinstance(command, Dispatch) and not idempotent and may_have_run:
                target = (command.record.agent_id, command.record.instance)
                assert target in may_have_run, (target, may_have_run)
        assert finishes <= 1 and retries <= max_retries
        if life.ended:
            assert not requests
            assert life.on(Woke(), now) == []
            return
        assert len(requests) == 1 and commands[-1] is requests[0], commands
        now += data.draw(st.sampled_from([0.0, 0.1, 0.5, 3.0]))
        last = answer(data, life, requests[0], idempotent)
        if isinstance(last, Ended):
            verdict = last.verdict
            proof = verdict.full or (verdict.outcome is Outcome.UNDELIVERED
                                     and not verdict.uncertain)
            if not proof:
                may_have_run.add((last.record.agent_id, last.record.instance))
        commands = life.on(last, now)
