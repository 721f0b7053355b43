"""docs/protocol.md §7, the capability spec: names are normalized (and warned about), the
params schema is checked on every submit, and ``latency_ms`` sets the completion timeout —
left out, the handler gets the coordinator's ``default_timeout`` (the page's first screen says
so; test_conf_08_timeout_default.py proves the rest of that rule)."""

from __future__ import annotations

import asyncio

from rawpeer import agent, answer, caller, submit

from reach import Reach
from reach.testing import ManualClock


async def test_names_are_normalized_when_registering_and_submitting(reach: Reach) -> None:
    worker = await agent(reach.url, "namer", [
        {"name": "SalesQuery"}, {"name": "CRM.findCustomer"}, {"name": "query-inventory"},
        {"name": "report"}])
    assert worker.welcome["capabilities"] == ["sales.query", "crm.find_customer",
                                              "inventory.query", "report"]
    assert len(worker.welcome["warnings"]) == 3  # three were rewritten
    look_alike = await agent(reach.url, "twister", [{"name": "query.inventory"}])
    assert any("inventory.query" in w for w in look_alike.welcome["warnings"])
    boss = await caller(reach.url)
    await boss.send(submit(1, "query_sales"))
    invoke = await worker.expect("invoke")
    assert invoke["capability"] == "sales.query"
    await answer(worker, invoke, "normalized")
    assert (await boss.outcome(1))["result"] == "normalized"


async def test_no_latency_ms_gives_a_handler_the_default_timeout() -> None:
    """Undeclared, no history: the completion timeout is ``default_timeout`` from the ack (a
    handler past the old 1.2 s is not cut off)."""
    clock = ManualClock()
    async with Reach.start(clock=clock, heartbeat_interval=60, default_timeout=3.0) as reach:
        worker = await agent(reach.url, "default-latency", [{"name": "conf.slow"}])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.slow"))
        invoke = await worker.expect("invoke")
        await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"],
                           "attempt": 1})
        await boss.expect("accepted", id=1)
        await asyncio.sleep(0.02)  # the ack is read
        await clock.advance(2.99)
        await boss.silent(0.05)  # still running at 2.99 s
        await clock.advance(0.02)
        error = (await boss.outcome(1))["error"]
        assert error["code"] == "timeout" and error["details"]["agent"] == "default-latency"


async def test_a_declared_latency_ms_sets_the_timeout(reach: Reach) -> None:
    worker = await agent(reach.url, "quick-declared", [{"name": "conf.fast",
                                                        "latency_ms": 50}])
    boss = await caller(reach.url)
    loop = asyncio.get_running_loop()
    await boss.send(submit(1, "conf.fast"))
    invoke = await worker.expect("invoke")
    acked = loop.time()
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
    error = (await boss.outcome(1))["error"]
    took = loop.time() - acked
    assert error["code"] == "timeout" and 0.05 <= took < 1.0, took
