"""A caller's wait survives its coordinator's death (issue 15): real ``reach serve`` processes
on one SQLite file, one after the other (two coordinators may not share a SQLite file at once;
a cluster shares PostgreSQL instead, and this is the same story told on one file).

Coordinator A takes a submit and a call for a slow agent and is SIGKILLed while the agent
works; coordinator B starts on the same file and resumes both tasks; the agent and the caller,
each given [A, B], move to B by themselves; the agent finishes, and the caller's
``handle.result()`` and its in-flight ``client.call`` get the answers, asked of B by task id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from subprocs import Proc, free_port, start_coordinator

from reach import Agent, Client
from reach.testing import wait_until


async def test_a_handle_and_a_call_survive_their_coordinator_being_killed(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    db = tmp_path / "reach.db"
    url_a, url_b = (f"ws://127.0.0.1:{free_port()}" for _ in range(2))
    coordinator_a = start_coordinator(spawn, "coordinator-a", url_a.rsplit(":", 1)[1], db)
    await coordinator_a.wait_for("coordinator listening on")

    release = asyncio.Event()
    agent = Agent("reporter", reconnect_base=0.01, reconnect_cap=0.05)

    @agent.capability("report.make", idempotent=True)
    async def make(n: int) -> dict[str, Any]:
        await release.wait()
        return {"n": n}

    # B is not up yet: both skip it and connect to A.
    async with agent.connect([url_a, url_b]), \
            Client.connect([url_a, url_b], caller="planner", reconnect_for=30) as client:
        assert agent.url == url_a and client.url == url_a
        handle = await client.submit("report.make", {"n": 7}, idempotency_key="k7")
        call = asyncio.ensure_future(client.call("report.make", {"n": 8}, timeout=30))
        # Both running at the agent, and both acknowledged: committed to the file.
        await wait_until(lambda: agent.executions == 2 and not client._submits, timeout=10)

        coordinator_a.kill9()
        coordinator_b = start_coordinator(spawn, "coordinator-b", url_b.rsplit(":", 1)[1], db)
        await coordinator_b.wait_for("coordinator listening on")
        await wait_until(lambda: agent.url == url_b and agent.online.is_set()
                         and client.url == url_b and client._connected.is_set(), timeout=20)

        release.set()
        assert await handle.result(timeout=20) == {"n": 7}
        assert await asyncio.wait_for(call, 20) == {"n": 8}
        view = await handle.status()  # asked of B, about a task A accepted
        assert view["state"] == "succeeded"
        assert "resumed" in [h["note"] for h in view["history"]]
        # Each key ran once: B's invoke joined the run A had started.
        assert agent.executions == 2
