"""Drill: a slow idempotent read outlives its completion timeout and is retried."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from conftest import Runs

from reach import Context
from reach.testing import Cluster

CAP = "ticket.classify"


async def test_slow_read_is_retried_runs_once_and_answers(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "Ticket classification (3 s) retried at a 2.4 s timeout: duplicate tickets and
    notifications." Scaled: the read declares 100 ms (completion timeout 120 ms) and takes
    250 ms. It is idempotent, so the coordinator retries it; the retry reaches the agent while
    the first run is still going, and the SDK's idempotency check makes it wait for that run
    instead of starting another. The key runs once and the caller gets the answer."""
    cluster = await cluster_factory(max_retries=3)
    runs = Runs()

    async def classify(text: str, ctx: Context) -> dict[str, str]:
        runs.start(ctx.idempotency_key, "classifier")
        await asyncio.sleep(0.25)
        return {"text": text, "label": "billing"}

    await cluster.add_agent("classifier", {"ticket.classify": classify}, idempotent=True,
                            latency_ms=100)
    client = await cluster.client("helpdesk")

    handle = await client.submit(CAP, {"text": "refund please"}, idempotency_key="ticket-7")
    assert await handle.result(timeout=5) == {"text": "refund please", "label": "billing"}
    assert runs.started == {"ticket-7": 1}, runs.started

    view = await client.status(handle.task_id)
    assert view["state"] == "succeeded"
    outcomes = [a["outcome"] for a in view["attempts"]]
    assert len(outcomes) >= 2 and outcomes[0] == "timeout" and outcomes[-1] == "ok", outcomes
    assert any(h["state"] == "retrying" for h in view["history"])
    await asyncio.sleep(0.05)
    assert runs.started == {"ticket-7": 1}
