"""Drill: a slow non-idempotent write outlives its completion timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from conftest import Runs

from reach import Context, ReachTimeout
from reach.testing import Cluster, wait_until

CAP = "inventory.write"


async def test_slow_write_runs_exactly_once_and_the_caller_gets_timeout(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "Receipt delayed 10+ s; the coordinator retried a write that had already
    succeeded: inventory written twice." Scaled: the write declares 50 ms (completion timeout
    60 ms) and takes 300 ms. Two agents could take it, so a retry or fail-over would be easy;
    the write still runs exactly once, the caller gets ``ReachTimeout`` (code ``timeout``),
    and the task is kept as a dead letter with its one timed-out attempt."""
    cluster = await cluster_factory()
    runs = Runs()
    finished: list[str] = []

    def writer(name: str) -> Callable[..., Awaitable[str]]:
        async def write(sku: str, qty: int, ctx: Context) -> str:
            runs.start(ctx.idempotency_key, name)
            await asyncio.sleep(0.3)
            finished.append(ctx.idempotency_key)
            return f"{name} wrote {qty} x {sku}"
        return write

    for name in ("store-a", "store-b"):
        await cluster.add_agent(name, {CAP: writer(name)}, scope="write", latency_ms=50)
    client = await cluster.client("checkout")

    handle = await client.submit(CAP, {"sku": "s-1", "qty": 3}, idempotency_key="receipt-1")
    with pytest.raises(ReachTimeout) as caught:
        await handle.result(timeout=5)
    assert caught.value.code == "timeout"
    assert "not idempotent" in caught.value.message

    # The slow write does finish (it was never cancelled), and nothing runs it again after.
    await wait_until(lambda: finished == ["receipt-1"], timeout=3)
    await asyncio.sleep(0.1)
    assert runs.started == {"receipt-1": 1}, runs.started

    view = await client.status(handle.task_id)
    assert view["state"] == "dead"
    assert [a["outcome"] for a in view["attempts"]] == ["timeout"]
    assert not any(h["state"] == "retrying" for h in view["history"])
    letters = cluster.reach.dead_letters(capability=CAP)
    assert [d["task_id"] for d in letters] == [handle.task_id]
    assert letters[0]["error"]["code"] == "timeout"

    # The caller asking again with the same key gets the first task's outcome, not a new run.
    with pytest.raises(ReachTimeout):
        await client.call(CAP, {"sku": "s-1", "qty": 3}, idempotency_key="receipt-1")
    assert runs.started == {"receipt-1": 1}
