"""Drill: every agent of a capability faults on a fifth of its calls, evenly."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from reach import Context, ReachError
from reach.testing import Cluster

CAP = "text.embed"
TASKS, WIDTH, FAULT_RATE = 300, 32, 0.2


@pytest.mark.xfail(strict=True, reason=(
    "reach/resilience.py Breaker: 'open at >= 50 % of the last 10 calls, at least 5' trips on "
    "noise at a 20 % fault rate (P(>=5 of 10) = 3.3 % per window, and the window slides on "
    "every call), so every agent's breaker is open most of the time; reach/gateway.py _drive "
    "then spends the task's retries waiting for 'no healthy agent' and dead-letters it with "
    "no attempt. The soak (bench/soak.py) shows the same: ~30 % dead letters, 'no healthy "
    "agent'"))
async def test_uniform_faults_are_hidden_by_retries_not_turned_into_an_outage(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "A failing text-embedding service; a global breaker would have cut healthy
    agents too" (lesson: breakers per agent) and "Breaker: window of 10 calls, at least 5,
    > 50–60 % failure → open; close below 20 %". Here no agent is worse than another: all
    three fault on a seeded, independent 20 % of runs (a plain exception; the reads are
    idempotent, so a fault is retried on another agent, up to 2 retries, within the 20 %
    retry budget). Retries should hide almost all of it (a read fails three times in a row
    0.8 % of the time; the budget refuses a few more). What must not happen is that the
    breakers, opening on the noise of 10-call windows, take all three agents out at once and
    turn a 20 % fault rate into an outage."""
    cluster = await cluster_factory(breaker_open_for=0.5)
    rng = random.Random(20)

    def embedder(name: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        async def embed(text: str, ctx: Context) -> dict[str, Any]:
            await asyncio.sleep(0.002)
            if rng.random() < FAULT_RATE:
                raise RuntimeError("embedding backend returned 503")
            return {"agent": name, "text": text}
        return embed

    for j in range(3):
        await cluster.add_agent(f"embed-{j}", {CAP: embedder(f"embed-{j}")}, idempotent=True,
                                latency_ms=500, max_concurrency=WIDTH)
    client = await cluster.client("search")
    todo = collections.deque(range(TASKS))
    outcomes: collections.Counter[str] = collections.Counter()

    async def worker() -> None:
        while todo:
            i = todo.popleft()
            try:
                await client.call(CAP, {"text": f"t{i}"}, idempotency_key=f"e{i}")
                outcomes["ok"] += 1
            except ReachError as exc:
                outcomes["no healthy agent" if "no healthy agent" in exc.message
                         else exc.code] += 1

    await asyncio.gather(*(worker() for _ in range(WIDTH)))
    opened = {a["name"]: a["breaker"] for a in cluster.reach.agents()}
    print(f"\nuniform faults: {dict(outcomes)}; breakers at the end {opened}")
    assert outcomes["ok"] >= 0.95 * TASKS, dict(outcomes)
