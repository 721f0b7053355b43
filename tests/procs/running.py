"""What every agent process of the drills shares: connect, say ``ready AGENT_ID``, run until
SIGTERM or SIGINT, then leave with a drain."""

from __future__ import annotations

import asyncio
import signal

from reach import Agent


async def serve_until_stopped(agent: Agent, url: str, drain: float = 1.0) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await agent.connect(url)
    print(f"ready {agent.agent_id}", flush=True)
    try:
        await stop.wait()
    finally:
        await agent.close(drain=drain)
