"""Drill: an undeclared capability's handler takes longer than the old default timeout."""

from __future__ import annotations

import asyncio

from reach import Agent, Client, Reach


async def test_an_sdk_handler_slower_than_1_2_s_scaled_is_not_dead_lettered() -> None:
    """Field: "An agent that declares no latency_ms gets a 1.2 s completion timeout: a 1.5 s
    handler's work ran and was dead-lettered anyway" (issue 13). Scaled by 1/10 on a real
    clock: a 0.15 s handler (the old 1.2 s × 0.1 is 0.12 s) under an undeclared capability,
    with ``default_timeout`` 0.6 s and, once it has two successes, a 0.45 s floor."""
    async with Reach.start(heartbeat_interval=0.1, default_timeout=0.6, timeout_floor=0.45,
                           timeout_samples=2) as reach:
        worker = Agent("sleeper", reconnect_base=0.02)

        @worker.capability("work.slow")
        async def slow(ms: int) -> int:
            await asyncio.sleep(ms / 1000)
            return ms

        async with worker.connect(reach.url), Client.connect(reach.url, caller="c") as client:
            for _ in range(3):
                assert await client.call("work.slow", {"ms": 150}) == 150
            assert reach.dead_letters() == []
