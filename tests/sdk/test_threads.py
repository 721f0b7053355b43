"""Sync handlers run on each agent's own thread pool (``Agent(..., threads=N)``), never on
Python's shared default executor: one agent's blocked handlers starve neither another
agent's handlers nor the application's ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from typing import Any

import pytest

from reach import Agent, Client, Reach
from reach.testing import Cluster

REQUEST = contextvars.ContextVar("REQUEST", default="none")


async def test_one_agents_blocked_pool_leaves_the_other_and_the_default_executor_alone(
        ) -> None:
    """The blocked agent holds more threads than Python's default executor has (min(32,
    cpus + 4)): had its handlers run there, the other agent's sync calls and the app's own
    ``to_thread`` would wait for them."""
    loop = asyncio.get_running_loop()
    default_size = min(32, (os.cpu_count() or 1) + 4)
    width = default_size + 2
    cluster = await Cluster.start()
    release = threading.Event()
    blocked = threading.Semaphore(0)
    names: dict[str, set[str]] = {"slow": set(), "quick": set()}
    slow = Agent("slow", max_concurrency=width, threads=width, reconnect_base=0.02)
    quick = Agent("quick", max_concurrency=4, reconnect_base=0.02)

    @slow.capability("job.block", latency_ms=30_000)
    def block(i: int) -> int:
        names["slow"].add(threading.current_thread().name)
        blocked.release()
        release.wait(timeout=20)
        return i

    @quick.capability("job.quick", latency_ms=500)
    def fast(i: int) -> dict[str, Any]:
        names["quick"].add(threading.current_thread().name)
        return {"i": i, "request": REQUEST.get()}

    try:
        for agent in (slow, quick):
            await agent.connect(cluster.url)
            cluster.agents.append(agent)
        assert quick.threads == 4 and slow.threads == width  # default: max_concurrency
        client = await cluster.client()
        stuck = [asyncio.ensure_future(client.call("job.block", {"i": i}, timeout=25))
                 for i in range(width)]
        for _ in range(width):  # every thread of the slow agent is now inside a handler
            await asyncio.wait_for(asyncio.to_thread(blocked.acquire), 10)
        # With the slow pool full: the quick agent's sync calls and the app's to_thread run.
        results = [await client.call("job.quick", {"i": i}, timeout=5) for i in range(10)]
        assert [r["i"] for r in results] == list(range(10))
        on_default = await asyncio.wait_for(
            loop.run_in_executor(None, lambda: threading.current_thread().name), 5)
        assert not any(s.done() for s in stuck)  # the slow ones were blocked all along
        assert len(names["slow"]) == width
        assert all(n.startswith("reach-slow") for n in names["slow"]), names
        assert all(n.startswith("reach-quick") for n in names["quick"]), names
        assert not on_default.startswith("reach-")
        release.set()
        assert sorted(await asyncio.gather(*stuck)) == list(range(width))
        pool = slow._executor
        assert pool is not None
    finally:
        release.set()
        await cluster.close()
    assert slow._executor is None and pool._shutdown  # shut down on close


async def test_a_sync_handler_sees_the_context_of_its_serving_task() -> None:
    """As ``asyncio.to_thread`` did: the handler runs in a copy of the caller's context."""
    async with Reach.start(heartbeat_interval=0.05) as reach:
        agent = Agent("ctx", threads=1, reconnect_base=0.02)

        @agent.capability("ctx.read")
        def read() -> str:
            return REQUEST.get()

        REQUEST.set("set-before-connect")  # the serving task copies the context it starts in
        async with agent.connect(reach.url), Client.connect(reach.url) as client:
            assert await client.call("ctx.read", {}, timeout=5) == "set-before-connect"


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threads"):
        Agent("x", threads=0)
    assert Agent("y", max_concurrency=7).threads == 7
    assert Agent("z", max_concurrency=7, threads=2).threads == 2
