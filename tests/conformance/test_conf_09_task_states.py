"""docs/protocol.md §9, task states: the history of a task the agent acknowledged, of one
answered without an ack (no ``running``), and of a deliberate answer (``failed``)."""

from __future__ import annotations

from typing import Any

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach

# (Declared long: at 200 ms a slow host's late ack found the attempt timed out, ``dead``.)
CAP = [{"name": "conf.state", "latency_ms": 60_000}]


async def history(boss: Peer, req_id: int, task_id: str) -> list[str]:
    await boss.send({"v": 1, "type": "status", "id": req_id, "task_id": task_id})
    view: dict[str, Any] = (await boss.expect("task", id=req_id))["task"]
    assert [h["state"] for h in view["history"]][-1] == view["state"]
    return [h["state"] for h in view["history"]]


async def test_histories(reach: Reach) -> None:
    worker = await agent(reach.url, "stateful", CAP)
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.state"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
    await answer(worker, invoke, 1)
    await boss.outcome(1)
    assert await history(boss, 2, invoke["task_id"]) == [
        "pending", "dispatched", "running", "succeeded"]
    await boss.send(submit(3, "conf.state"))
    invoke = await worker.expect("invoke")
    await answer(worker, invoke, 2)  # answered before any ack: no `running`
    await boss.outcome(3)
    assert await history(boss, 4, invoke["task_id"]) == ["pending", "dispatched", "succeeded"]
    await boss.send(submit(5, "conf.state"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "no",
                                 "details": {"answer": True}}})
    await boss.outcome(5)
    assert await history(boss, 6, invoke["task_id"]) == ["pending", "dispatched", "failed"]
