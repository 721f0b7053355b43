"""What a dead-lettered task tells its caller about its last attempt (reach.core.ends): the
error's code, its message naming the agent and what happened, and the facts at the top of
``details`` where a ``TaskError`` answer has them, so callers read both the same way."""

from __future__ import annotations

from typing import Any

import pytest

from reach.core.agents import AgentRecord
from reach.core.ends import attempt_error, maybe_ran
from reach.core.tasks import Attempt, Envelope, Outcome
from reach.errors import ReachTimeout, TaskFailed, Unavailable

ENV = Envelope(task_id="t1", trace_id="tr1", capability="ledger.write", params={},
               caller="amy", idempotency_key="amy/k")
AGENT = AgentRecord(agent_id="ag-1", name="ledger", version="1", max_concurrency=1,
                    capabilities={})


def ended(outcome: Outcome, error: str | None = None) -> Attempt:
    return Attempt(number=2, agent_id="ag-1", agent="ledger", started_at=1.0, ended_at=2.0,
                   outcome=outcome.value, error=error)


@pytest.mark.parametrize("retryable", [True, False])
def test_an_attempt_the_agent_never_got_says_so_and_why(retryable: bool) -> None:
    error = attempt_error(ENV, ended(Outcome.UNDELIVERED, "the link refused it"), None,
                          AGENT, retryable)
    assert isinstance(error, TaskFailed)
    assert error.message == ("agent 'ledger' never got the task: the link refused it"
                             + ("" if retryable else "; not retried: not idempotent"))
    assert error.details == {"answer": False, "agent": "ledger",
                             "remote": {"code": "undelivered", "agent": "ledger"}}


@pytest.mark.parametrize(("outcome", "error"), [
    (Outcome.LOST, "link lost"),  # it had the task: acknowledged, then its link went away
    (Outcome.UNDELIVERED, None),  # given up unacknowledged, with no reason recorded
])
@pytest.mark.parametrize("retryable", [True, False])
def test_an_agent_that_went_away_with_the_task_is_named(outcome: Outcome, error: str | None,
                                                        retryable: bool) -> None:
    failed = attempt_error(ENV, ended(outcome, error), None, AGENT, retryable)
    assert isinstance(failed, TaskFailed)
    assert failed.message == ("agent 'ledger' went away while running the task"
                              + ("" if retryable else "; not retried: not idempotent"))
    assert failed.details == {"answer": False, "agent": "ledger",
                              "remote": {"code": outcome.value, "agent": "ledger"}}


def test_a_fault_puts_the_agents_facts_on_top_and_is_never_an_answer() -> None:
    payload: dict[str, Any] = {
        "code": "task_error", "message": "disk full",
        "details": {"exit_code": 3, "type": "OSError", "answer": True, "remote": "spoofed"}}
    failed = attempt_error(ENV, ended(Outcome.FAULT), payload, AGENT, True)
    assert isinstance(failed, TaskFailed) and failed.message == "disk full"
    # The agent's own details at the top, but ``answer`` is the coordinator's verdict and
    # ``remote`` is the agent's whole error, not anything the agent put in its details.
    assert failed.details == {"exit_code": 3, "type": "OSError", "answer": False,
                              "agent": "ledger", "remote": {**payload, "agent": "ledger"}}
    bare = attempt_error(ENV, ended(Outcome.FAULT), None, AGENT, True)
    assert bare.message == "agent fault"
    assert bare.details == {"answer": False, "agent": "ledger", "remote": {"agent": "ledger"}}


@pytest.mark.parametrize("retryable", [True, False])
def test_a_timeout_names_the_capability_and_the_agent(retryable: bool) -> None:
    failed = attempt_error(ENV, ended(Outcome.TIMEOUT), None, AGENT, retryable)
    assert isinstance(failed, ReachTimeout)
    assert failed.message == ("'ledger.write' at agent 'ledger' did not complete in time"
                              + ("" if retryable else
                                 "; not retried: the capability is not idempotent"))
    assert failed.details == {"agent": "ledger"}


def test_a_write_whose_agent_vanished_before_its_ack_may_have_run() -> None:
    error = maybe_ran(ENV, ended(Outcome.LOST))
    assert isinstance(error, Unavailable) and error.details == {"agent_id": "ag-1"}
    assert "before it acknowledged attempt 2 of 'ledger.write'" in error.message
    assert "replay it if it did not run" in error.message
