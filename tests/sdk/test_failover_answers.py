"""An agent that moves to another coordinator answers there only the work delivered there.

Work that came in on a connection that is gone counts as lost with it (docs/protocol.md §2,
§8): the coordinator that takes over delivers it again under a new attempt, and that attempt
is what the agent answers, from the run it already has going (one run per idempotency key,
which the new attempt joins) or from its key cache. The old attempt's frames (ack, chunks,
outcome) and the answers to the old connection's probes are not sent on the new connection,
where the coordinator could only refuse them ("names attempt 1, but the attempt in flight at
this agent is 2").

The end-to-end tests use two in-process coordinators on one SQLite file, one after the other
(two may not share a SQLite file at once; a cluster shares PostgreSQL): A takes the task and
stops while the agent has it; B starts on the file, resumes the task as attempt 2, and the
agent (given [A, B]) moves to B by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from subprocs import free_port

from reach import Agent, Client, Reach
from reach.testing import Cluster, wait_until
from reach.wire import protocol as p

FAST = {"heartbeat_interval": 0.05, "drain_timeout": 0.05}


def slow_agent(runs: list[int], release: asyncio.Event) -> Agent:
    agent = Agent("reporter", reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("report.make", idempotent=True)
    async def make(n: int) -> dict[str, Any]:
        runs.append(n)
        await release.wait()
        return {"n": n}

    return agent


async def task_view(reach: Reach, task_id: str, pred: Callable[[dict[str, Any]], bool],
                    timeout: float = 5.0) -> dict[str, Any]:
    """The coordinator's view of a task, once ``pred`` holds of it."""
    deadline = time.monotonic() + timeout
    while True:
        view = await reach.task(task_id)
        if view is not None and pred(view):
            return view
        assert time.monotonic() < deadline, f"task never got there: {view}"
        await asyncio.sleep(0.005)


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What either side logged about a frame naming the wrong attempt, or a probe answer
    no one asked for (both are what a stale answer on a new connection gets)."""
    return [r.getMessage() for r in caplog.records
            if "names attempt" in r.getMessage() or "coordinator says" in r.getMessage()]


@pytest.fixture
async def handover(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Coordinator A started on a file; B's URL reserved, B started by ``start_b()``."""
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    port_b = free_port()
    a = await Reach.start(store=store, **FAST)
    started: list[Reach] = []

    async def start_b() -> Reach:
        started.append(await Reach.start(store=store, port=port_b, **FAST))
        return started[0]

    try:
        yield {"a": a, "url_b": f"ws://127.0.0.1:{port_b}", "start_b": start_b}
    finally:
        for reach in started:
            await reach.stop()
        await a.stop()


async def test_a_run_going_when_its_task_is_delivered_again_answers_the_new_attempt_only(
        handover: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "reach")
    a, url_b = handover["a"], handover["url_b"]
    runs: list[int] = []
    release = asyncio.Event()
    agent = slow_agent(runs, release)
    async with agent.connect([a.url, url_b]), \
            Client.connect([a.url, url_b], caller="planner", reconnect_for=10) as client:
        handle = await client.submit("report.make", {"n": 7}, idempotency_key="k7")
        await wait_until(lambda: runs == [7] and not client._submits, timeout=5)
        await a.stop()  # lost mid-call: the task stays unfinished in the file
        b = await handover["start_b"]()
        # B resumed it as attempt 2, and the agent acknowledged that attempt while the
        # handler of attempt 1 was still running: attempt 2 waits for that run.
        await task_view(b, handle.task_id, lambda v: v["state"] == "running"
                        and v["attempts"][-1]["number"] == 2)
        assert agent.url == url_b and runs == [7]
        release.set()
        assert await handle.result(timeout=5) == {"n": 7}
        view = await task_view(b, handle.task_id, lambda v: v["state"] == "succeeded")
    assert runs == [7] and agent.executions == 1
    assert [(t["number"], t["outcome"]) for t in view["attempts"]] == [(1, "lost"), (2, "ok")]
    assert refusals(caplog) == []


async def test_a_run_that_ended_while_no_coordinator_was_up_answers_from_the_key_cache(
        handover: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "reach")
    a, url_b = handover["a"], handover["url_b"]
    runs: list[int] = []
    release = asyncio.Event()
    agent = slow_agent(runs, release)
    async with agent.connect([a.url, url_b]), \
            Client.connect([a.url, url_b], caller="planner", reconnect_for=10) as client:
        handle = await client.submit("report.make", {"n": 8}, idempotency_key="k8")
        await wait_until(lambda: runs == [8] and not client._submits, timeout=5)
        await a.stop()
        release.set()  # it ends with no connection to answer on: the answer is kept, unsent
        await wait_until(lambda: not agent._runs and len(agent._done) == 1, timeout=5)
        b = await handover["start_b"]()
        assert await handle.result(timeout=5) == {"n": 8}
        view = await task_view(b, handle.task_id, lambda v: v["state"] == "succeeded")
    assert runs == [8] and agent.executions == 1
    assert [(t["number"], t["outcome"]) for t in view["attempts"]] == [(1, "lost"), (2, "ok")]
    assert refusals(caplog) == []


async def test_acks_chunks_outcomes_and_probe_answers_stay_with_their_connection(
        reach_cluster: Cluster) -> None:
    """Frame by frame, with the agent's sends recorded: once the connection is counted lost,
    nothing about what came in on it is sent (not the ack due after the grace, the chunks,
    the outcome, nor the answer to its probe); attempt 2, delivered on the next, gets its
    ack and the shared run's outcome."""
    release = asyncio.Event()
    items: list[int] = []

    async def count(n: int) -> AsyncIterator[int]:
        for i in range(n):
            if i == 1:
                await release.wait()
            items.append(i)
            yield i

    agent = await reach_cluster.add_agent("streamer", {"count.up": count}, idempotent=True,
                                          max_concurrency=1)
    sent: list[dict[str, Any]] = []
    def record(text: str) -> None:
        sent.append({k: v for k, v in json.loads(text).items() if k != "v"})

    agent._post_text = record  # type: ignore[method-assign]
    first = p.Invoke(task_id="t1", attempt=1, capability="count.up", params={"n": 3},
                     idempotency_key="planner:k", trace_id="tr")
    agent._on_frame(p.dump(first))
    agent._on_frame(p.dump(p.Probe(id=5)))  # it will wait for the one slot, the handler's
    # The socket closes before anything was said about either (the same turn of the loop:
    # no ack timer has fired, the handler has not started).
    agent._lost_connection()  # what agent.py does when the socket closes
    await wait_until(lambda: items == [0] and len(agent._probing) == 1)
    agent._on_frame(p.dump(first.model_copy(update={"attempt": 2})))
    await wait_until(lambda: sent == [{"type": "ack", "task_id": "t1", "attempt": 2}])
    release.set()
    await wait_until(lambda: not agent._runs and not agent._probing)
    assert items == [0, 1, 2] and agent.executions == 1
    # no chunk 1 or 2 of attempt 1, no outcome of attempt 1, no answer to probe 5
    assert sent == [{"type": "ack", "task_id": "t1", "attempt": 2},
                    {"type": "result", "task_id": "t1", "attempt": 2, "result": [0, 1, 2]}]
