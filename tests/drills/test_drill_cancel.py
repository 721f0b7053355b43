"""Drill: abandoned work stops (issue 27). A cancelled task, a timed-out attempt: the agent is
told at once and its handler stops; nothing of the task keeps a slot."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from held import Held
from subprocs import agent_view

from reach import Cancelled, Context, ReachError
from reach.testing import Cluster, wait_until


async def test_a_cancel_stops_the_running_handler_within_one_heartbeat(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Issue 27, "abandoned work keeps running": when the coordinator gave an attempt up the
    agent was not told; it learned only if it later spoke of that attempt. Here a caller
    cancels a 20 s report mid-run: the task ends ``cancelled`` at once, its waiter hears
    ``Cancelled``, the handler is stopped within one heartbeat (50 ms), and the agent's slot
    is free again."""
    cluster = await cluster_factory()
    held = Held()
    started, stopped = held.started, held.stopped
    await cluster.add_agent("reports", {"report.build": held.run}, latency_ms=20_000)
    client = await cluster.client("analyst")
    handle = await client.submit("report.build", {"n": 1})
    await asyncio.wait_for(started.wait(), 5)
    asked = time.monotonic()
    view = await handle.cancel()
    assert view["state"] == "cancelled"
    assert [a["outcome"] for a in view["attempts"]] == ["cancelled"]
    await asyncio.wait_for(stopped.wait(), 5)
    assert time.monotonic() - asked < 0.05 * 4  # one heartbeat, with room for a slow loop
    with pytest.raises(Cancelled, match="cancelled by analyst"):
        await handle.result(timeout=5)
    await wait_until(lambda: (agent_view(cluster.reach, "reports") or {}).get("inflight") == 0)
    assert cluster.reach.dead_letters() == []  # nothing failed
    again = await handle.cancel()  # after the end: nothing changes
    assert again["state"] == "cancelled"


async def test_a_thread_handler_sees_ctx_cancelled_and_a_timeout_stops_an_async_one(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """A thread handler cannot be interrupted: it sees ``ctx.cancelled`` and stops itself.
    An idempotent attempt that timed out is stopped once its task has ended, rather than run
    on unseen (not at the timeout: a retry at the same agent joins the run; a write that
    outlives its timeout is left to finish, test_drill_slow_write)."""
    cluster = await cluster_factory()
    seen = threading.Event()
    stuck = Held()

    def crunch(ctx: Context) -> str:
        for _ in range(2000):
            if ctx.cancelled:
                seen.set()
                return "stopped"
            time.sleep(0.005)
        return "finished"

    await cluster.add_agent("crunch", {"data.crunch": crunch}, latency_ms=20_000)
    await cluster.add_agent("stuck", {"data.stuck": stuck.run}, latency_ms=20, idempotent=True)
    client = await cluster.client("analyst")
    handle = await client.submit("data.crunch", {})
    await wait_until(lambda: (agent_view(cluster.reach, "crunch") or {}).get("inflight") == 1)
    await handle.cancel()
    await asyncio.get_running_loop().run_in_executor(None, seen.wait, 5)
    assert seen.is_set()
    with pytest.raises(ReachError):
        await client.call("data.stuck", {}, max_retries=0)  # one attempt: dead at its timeout
    await asyncio.wait_for(stuck.stopped.wait(), 5)


async def test_delete_on_the_rest_door_cancels_and_only_the_caller_may(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """``DELETE /v1/tasks/{id}``: the caller's own task ends ``cancelled`` (200, the view);
    another caller's is refused; the waiter of the task hears 409 ``cancelled``."""
    cluster = await cluster_factory(tokens={"t-boss": "boss", "t-other": "other",
                                            "t-agent": "reports"})
    gate = asyncio.Event()

    async def build() -> str:
        await gate.wait()
        return "built"

    await cluster.add_agent("reports", {"report.build": build}, latency_ms=20_000,
                            token="t-agent")
    url = cluster.reach.http_url
    assert url is not None
    boss, other = {"Authorization": "Bearer t-boss"}, {"Authorization": "Bearer t-other"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/tasks", json={"capability": "report.build"},
                             headers=boss) as r:
            assert r.status == 202
            task_id = (await r.json())["task_id"]
        async with http.delete(f"{url}/v1/tasks/{task_id}", headers=other) as r:
            assert r.status == 404  # as if there were no such task
        waiting = asyncio.ensure_future(http.get(f"{url}/v1/tasks/{task_id}?wait=10",
                                                 headers=boss))
        async with http.delete(f"{url}/v1/tasks/{task_id}", headers=boss) as r:
            assert r.status == 200 and r.headers["X-Reach-State"] == "cancelled"
            body = await r.json()
            assert body["state"] == "cancelled" and body["error"]["code"] == "cancelled"
        async with await waiting as r:
            assert (await r.json())["state"] == "cancelled"
    gate.set()
