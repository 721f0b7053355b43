"""A failing handler's log (issue 14): "Handler failures log a whole traceback per retry (three
per failing call)". Now one line per failed attempt, and the traceback once per task."""

from __future__ import annotations

import logging

import pytest

from reach import TaskFailed
from reach.sdk import faults
from reach.testing import Cluster
from reach.wire import protocol as p


async def test_a_call_retried_three_times_logs_one_traceback_and_three_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    cluster = await Cluster.start(max_retries=2)
    try:
        async def broken(sku: str) -> None:
            raise ConnectionError("inventory DB connection reset")

        await cluster.add_agent("inventory", {"stock.query": broken}, idempotent=True)
        client = await cluster.client("planner")
        with caplog.at_level(logging.ERROR, logger="reach.agent"):
            with pytest.raises(TaskFailed):
                await client.call("stock.query", {"sku": "A"})
            with pytest.raises(TaskFailed):
                await client.call("stock.query", {"sku": "B"})
    finally:
        await cluster.close()
    faults = [r for r in caplog.records if r.name == "reach.agent"]
    assert len(faults) == 6  # two calls, three attempts each
    first = [r for r in faults if r.exc_info]
    assert len(first) == 2  # one traceback per call
    assert all(r.getMessage().startswith("agent inventory: handler for stock.query failed "
                                         "(task ") for r in first)
    again = [r.getMessage() for r in faults if not r.exc_info]
    assert len(again) == 4 and all(
        "failed again" in m and m.endswith("ConnectionError: inventory DB connection reset")
        for m in again)
    assert sorted(m.split("attempt ")[1].split(")")[0] for m in again) == ["2", "2", "3", "3"]


def test_the_memory_of_logged_tasks_is_bounded(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(faults, "FAULTS_KEPT", 2)
    log = faults.FaultLog()

    def invoke(task: str, attempt: int = 1) -> p.Invoke:
        return p.Invoke(task_id=task, attempt=attempt, capability="x.run",
                        idempotency_key=task, trace_id=task)

    with caplog.at_level(logging.ERROR, logger="reach.agent"):
        for task in ("t1", "t2", "t3"):
            log.fault("w", invoke(task), RuntimeError("boom"))
        log.fault("w", invoke("t1", 2), RuntimeError("boom"))  # forgotten: traceback again
        log.fault("w", invoke("t3", 2), RuntimeError("boom"))  # remembered: one line
    assert list(log.logged) == ["t3", "t1"]
    assert [bool(r.exc_info) for r in caplog.records] == [True, True, True, True, False]
