"""docs/protocol.md §8, timeouts, retries and fail-over: an unacknowledged delivery fails over
at once to another agent (no retry spent), a completion timeout is retried only for an
idempotent capability, a non-idempotent one ends ``timeout`` with the reason in the message,
and a retry waits out a backoff."""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach


async def first_invoke(*peers: Peer) -> tuple[Peer, dict[str, Any]]:
    """The first of ``peers`` to be sent an invoke, and that invoke."""
    waits = {asyncio.ensure_future(p.expect("invoke")): p for p in peers}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for fut in pending:
        fut.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    fut = next(iter(done))
    return waits[fut], fut.result()


async def test_no_ack_in_time_fails_over_to_another_agent() -> None:
    async with Reach.start(heartbeat_interval=0.1, ack_timeout=0.05) as reach:
        # idempotent: a late ack of work that is not is waited for (test_conf_03_at_most_once)
        cap = {"name": "conf.write", "latency_ms": 500, "idempotent": True}
        one = await agent(reach.url, "silent-one", [cap])
        two = await agent(reach.url, "silent-two", [cap])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", max_retries=0))
        silent, invoke = await first_invoke(one, two)
        assert invoke["attempt"] == 1
        other = two if silent is one else one
        retry = await other.expect("invoke")  # at the ack deadline, without a backoff
        assert (retry["task_id"], retry["attempt"]) == (invoke["task_id"], 2)
        await answer(other, retry, "second agent")
        assert (await boss.outcome(1))["result"] == "second agent"  # max_retries=0: free


async def test_a_completion_timeout_is_not_retried_when_not_idempotent(reach: Reach) -> None:
    worker = await agent(reach.url, "flaky", [{"name": "job.slow", "latency_ms": 30}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.slow"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
    error = (await boss.outcome(1))["error"]
    assert error["code"] == "timeout"
    assert "not retried: the capability is not idempotent" in error["message"]
    # Never sent again, nor stopped: a write that outlives its timeout is left to finish (§3)
    await worker.silent(0.3)


async def test_an_idempotent_timeout_is_retried_after_a_backoff(reach: Reach) -> None:
    worker = await agent(reach.url, "retried", [{"name": "job.read", "latency_ms": 30,
                                                 "idempotent": True}])
    boss = await caller(reach.url)
    loop = asyncio.get_running_loop()
    await boss.send(submit(1, "job.read", max_retries=1))
    first = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "ack", "task_id": first["task_id"], "attempt": 1})
    acked = loop.time()
    second = await worker.expect("invoke", timeout=3)
    waited = loop.time() - acked
    assert second["attempt"] == 2 and second["idempotency_key"] == first["idempotency_key"]
    assert 0.036 + 0.4 - 0.05 <= waited < 2.0, waited  # 36 ms timeout + 0.5 s ± 20 %
    await answer(worker, second, "retried")
    assert (await boss.outcome(1))["result"] == "retried"
    await boss.send({"v": 1, "type": "status", "id": 2, "task_id": first["task_id"]})
    view = (await boss.expect("task", id=2))["task"]
    assert [a["outcome"] for a in view["attempts"]] == ["timeout", "ok"]
