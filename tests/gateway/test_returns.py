"""Declared result schemas (``returns``) on a real ``Gateway`` with fake ports: a result that
breaks the schema never reaches the caller; it is the agent's fault, retried elsewhere when
idempotent, dead-lettered as ``bad_result`` when nothing else can answer."""

from __future__ import annotations

from typing import Any

import pytest
from test_decisions import Rig, outcomes

from reach.core.schemas import SchemaError
from reach.core.tasks import Outcome, TaskState
from reach.ports import Work

S = TaskState
RETURNS = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}


def good(work: Work) -> tuple[str, Any]:
    return ("ok", {"total": 3})


def renamed(work: Work) -> tuple[str, Any]:
    return ("ok", {"amount": 3})


async def test_a_result_that_fits_is_the_answer() -> None:
    rig = Rig()
    try:
        rig.agent("a", good, returns=RETURNS)
        task = await rig.submit()
        assert task.state is S.SUCCEEDED and task.result == {"total": 3}
    finally:
        await rig.close()


async def test_a_broken_result_of_a_non_idempotent_capability_is_dead_lettered() -> None:
    rig = Rig()
    try:
        record, _ = rig.agent("v2", renamed, returns=RETURNS)
        task = await rig.outcome(await rig.submit())
        assert task.state is S.DEAD and task.result is None
        assert outcomes(task) == [("v2", Outcome.FAULT)]
        assert task.error is not None and task.error["code"] == "task_failed"
        remote = task.error["details"]["remote"]
        assert remote["code"] == "bad_result" and remote["agent"] == "v2"
        assert remote["details"]["version"] == "1"
        assert remote["details"]["errors"] == [
            {"path": "$", "message": "result must contain ['total'] properties"}]
        assert "breaks its returns schema at $" in (task.attempts[0].error or "")
        assert record.faults == 1 and list(record.breaker.outcomes) == [False]
        assert task.task_id in rig.gateway.dead
    finally:
        await rig.close()


async def test_a_broken_result_of_an_idempotent_capability_fails_over() -> None:
    rig = Rig()
    try:
        bad, _ = rig.agent("v2", renamed, returns=RETURNS, idempotent=True, weight=1000)
        rig.agent("v1", good, returns=RETURNS, idempotent=True, weight=1)
        task = await rig.outcome(await rig.submit())
        assert task.state is S.SUCCEEDED and task.result == {"total": 3}
        assert outcomes(task) == [("v2", Outcome.FAULT), ("v1", Outcome.OK)]
        assert bad.faults == 1
    finally:
        await rig.close()


async def test_the_same_result_without_returns_is_not_checked() -> None:
    rig = Rig()
    try:
        rig.agent("a", renamed)
        task = await rig.submit()
        assert task.state is S.SUCCEEDED and task.result == {"amount": 3}
    finally:
        await rig.close()


async def test_a_streaming_capability_is_checked_on_its_final_result() -> None:
    rig = Rig()
    try:
        rig.agent("s", lambda w: ("ok", ["a", 1]), streaming=True,
                  returns={"type": "array", "items": {"type": "string"}})
        task = await rig.outcome(await rig.submit())
        assert task.state is S.DEAD
        assert task.error is not None
        assert task.error["details"]["remote"]["details"]["errors"][0]["path"] == "$[1]"
    finally:
        await rig.close()


async def test_a_refused_returns_schema_refuses_the_registration() -> None:
    rig = Rig()
    try:
        with pytest.raises(SchemaError, match="returns schema"):
            rig.agent("a", good, returns={"enum": ["x" * 9000]})
        with pytest.raises(SchemaError, match="only local"):
            rig.agent("b", good, returns={"$ref": "https://example.com/r.json"})
    finally:
        await rig.close()
