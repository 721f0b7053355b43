"""An agent whose one capability, ``count.up``, counts its runs: what the tests of idempotency
keys at every door share (a key that ran once leaves one run; the answer is the run's count).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from reach import Agent


@asynccontextmanager
async def counting(url: str) -> AsyncIterator[list[int]]:
    """Connect the counter to the coordinator at ``url``; yields its runs (one 1 per run)."""
    agent = Agent("counter", reconnect_base=0.02)
    runs: list[int] = []

    @agent.capability("count.up")
    async def up() -> dict[str, int]:
        runs.append(1)
        return {"n": len(runs)}

    await agent.connect(url)
    try:
        yield runs
    finally:
        await agent.close(drain=0.2)
