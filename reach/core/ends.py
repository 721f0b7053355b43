"""What a dead-lettered task says about its last attempt (pure): the error the caller and
the dead-letter list show, with the facts a caller reads the same way as a ``TaskError``'s."""

from __future__ import annotations

from typing import Any

from reach.core.agents import AgentRecord
from reach.core.tasks import Attempt, Envelope, Outcome
from reach.errors import ReachError, ReachTimeout, TaskFailed, Unavailable


def attempt_error(env: Envelope, attempt: Attempt, payload: Any, record: AgentRecord,
                  retryable: bool) -> ReachError:
    """The error a dead-lettered task reports for its last attempt."""
    if attempt.outcome == Outcome.TIMEOUT:
        return ReachTimeout(
            f"{env.capability!r} at agent {record.name!r} did not complete in time"
            + ("" if retryable else "; not retried: the capability is not idempotent"),
            agent=record.name)
    if attempt.outcome == Outcome.FAULT:
        remote = {**(payload or {}), "agent": record.name}
        return TaskFailed(str(remote.get("message", "agent fault")), **facts(remote),
                          remote=remote)
    if attempt.outcome == Outcome.UNDELIVERED and attempt.error:  # it never got the task
        return TaskFailed(f"agent {record.name!r} never got the task: {attempt.error}"
                          + ("" if retryable else "; not retried: not idempotent"),
                          answer=False, agent=record.name,
                          remote={"code": attempt.outcome, "agent": record.name})
    return TaskFailed(f"agent {record.name!r} went away while running the task"
                      + ("" if retryable else "; not retried: not idempotent"),
                      answer=False, agent=record.name,
                      remote={"code": attempt.outcome, "agent": record.name})


def facts(remote: dict[str, Any]) -> dict[str, Any]:
    """A fault's facts at the top of the error's ``details``, where a ``TaskError`` answer has
    them (``exit_code``, ``type``, ``agent``…), so callers read both the same way; the agent's
    whole error stays under ``remote``. ``answer`` is false whatever the agent said: the
    coordinator judged this a fault."""
    details = remote.get("details")
    found = {k: v for k, v in details.items() if k != "remote"} \
        if isinstance(details, dict) else {}
    return {**found, "answer": False, "agent": remote["agent"]}


def maybe_ran(env: Envelope, attempt: Attempt) -> Unavailable:
    """The error of a task that is not idempotent whose agent's link went away before it
    acknowledged, and that could not go back to it (it did not come back as the same
    process in time, or never said which process it is): it may have run, so it was not
    sent to another agent (at most once)."""
    return Unavailable(
        f"the link to agent {attempt.agent!r} went away before it acknowledged attempt "
        f"{attempt.number} of {env.capability!r}; it may have started the work, and the "
        f"capability is not idempotent, so it was not sent to another agent: check, then "
        f"replay it if it did not run", agent_id=attempt.agent_id)
