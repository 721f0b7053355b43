"""docs/protocol.md §8 (and the first screen): the completion timeout of a capability that
declares no ``latency_ms``.

Field: "An agent that declares no latency_ms gets a 1.2 s completion timeout: a 1.5 s handler's
work ran and was dead-lettered anyway." The page's rule, row by row, against a real
coordinator driven by a ``ManualClock``: ``default_timeout`` until ``timeout_samples``
successes, then ``max(P95 × 1.5, timeout_floor)``; a declared ``latency_ms`` keeps × 1.2.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach
from reach.testing import ManualClock


async def _acked(worker: Peer, boss: Peer, req_id: int, capability: str) -> dict[str, Any]:
    await boss.send(submit(req_id, capability))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"],
                       "attempt": invoke["attempt"]})
    await boss.expect("accepted", id=req_id)
    await asyncio.sleep(0.02)  # the ack is read
    return invoke


async def test_an_undeclared_handler_past_1_2_s_answers_and_is_not_dead_lettered() -> None:
    clock = ManualClock()
    async with Reach.start(clock=clock, heartbeat_interval=60, default_timeout=3.0) as reach:
        worker = await agent(reach.url, "undeclared", [{"name": "conf.slow"}])
        boss = await caller(reach.url)
        invoke = await _acked(worker, boss, 1, "conf.slow")
        await clock.advance(1.5)  # the 1.5 s handler of the field note
        await boss.silent(0.05)
        await answer(worker, invoke, "done at 1.5 s")
        assert (await boss.outcome(1))["result"] == "done at 1.5 s"
        assert reach.dead_letters() == []


async def test_with_history_the_floor_bounds_an_undeclared_capability() -> None:
    """``timeout_samples`` quick successes later, P95 × 1.5 is ~0: the floor rules."""
    clock = ManualClock()
    async with Reach.start(clock=clock, heartbeat_interval=60, default_timeout=3.0,
                           timeout_floor=0.5, timeout_samples=2) as reach:
        worker = await agent(reach.url, "learned", [{"name": "conf.quick"}])
        boss = await caller(reach.url)
        for req_id in (1, 2):  # answered at once: 0 s on the manual clock
            await boss.send(submit(req_id, "conf.quick"))
            await answer(worker, await worker.expect("invoke"), req_id)
            assert (await boss.outcome(req_id))["result"] == req_id
        await _acked(worker, boss, 3, "conf.quick")
        await clock.advance(0.49)
        await boss.silent(0.05)  # still within the floor
        await clock.advance(0.02)
        error = (await boss.outcome(3))["error"]
        assert error["code"] == "timeout" and error["details"]["agent"] == "learned"


async def test_a_declared_latency_ignores_the_default() -> None:
    clock = ManualClock()
    async with Reach.start(clock=clock, heartbeat_interval=60, default_timeout=30.0) as reach:
        worker = await agent(reach.url, "declared", [{"name": "conf.fast", "latency_ms": 100}])
        boss = await caller(reach.url)
        await _acked(worker, boss, 1, "conf.fast")
        await clock.advance(0.11)
        await boss.silent(0.05)  # 100 ms × 1.2 = 120 ms
        await clock.advance(0.02)
        assert (await boss.outcome(1))["error"]["code"] == "timeout"
