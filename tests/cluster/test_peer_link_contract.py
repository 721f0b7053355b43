"""The peer link is an AgentLink like any other: acks, chunks, results, answers, faults and
cancels behave for an agent on another node as for a local one; a link that breaks mid-call
loses the attempt, and the gateway's rules decide what happens next (no double run)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from held import Held
from peering import Nodes, echo_agent, link, until, view

from reach import Agent, Reach, TaskError, TaskFailed
from reach.errors import ReachError


def streamer() -> Agent:
    agent = Agent("stream-b")

    @agent.capability("text.stream", latency_ms=200)
    async def stream(n: int) -> Any:
        for i in range(n):
            yield f"part {i}"

    @agent.capability("text.judge", latency_ms=200)
    async def judge(text: str) -> str:
        if not text:
            raise TaskError("text is blank")
        if text == "boom":
            raise RuntimeError("disk full")
        return "fine"

    return agent


async def test_chunks_answers_and_faults_cross_the_link(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(streamer(), b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    parts = [chunk async for chunk in client.stream("text.stream", {"n": 3})]
    assert parts == ["part 0", "part 1", "part 2"]
    assert await client.call("text.judge", {"text": "ok"}, timeout=5) == "fine"
    with pytest.raises(TaskError) as answer:
        await client.call("text.judge", {"text": ""}, timeout=5)
    assert "blank" in answer.value.message
    with pytest.raises(TaskFailed) as fault:
        await client.call("text.judge", {"text": "boom"}, timeout=5)
    assert "disk full" in str(fault.value.message)
    # The answer is not the agent's fault, the RuntimeError is: A's breaker counts one.
    assert view(a, "stream-b")["faults"] == 1 and view(b, "stream-b")["faults"] == 0


class Gate:
    """An agent whose handler waits until the test lets it go, counting its runs."""

    def __init__(self, name: str, idempotent: bool) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.runs = 0
        self.agent = Agent(name)

        @self.agent.capability("job.run", idempotent=idempotent, latency_ms=2000)
        async def run(n: int) -> dict[str, Any]:
            self.runs += 1
            self.started.set()
            await self.release.wait()
            return {"n": n, "by": name}


def running(reach: Reach, task_id: str) -> bool:
    task = reach.gateway.find(task_id)
    return task is not None and task.state.value == "running"


async def break_link(a: Reach, node: str) -> None:
    """Drop A's link to ``node`` at the socket, as a network fault would."""
    conn = a.peers._peers[node].conn
    assert conn is not None
    conn.ws.transport.abort()


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_link_breaking_mid_call_goes_back_to_the_agent_that_had_it(
        nodes: Nodes, idempotent: bool) -> None:
    """The attempt over the broken link is lost, but the agent at B most likely has the work
    (here: it is still running it). The task waits for that agent to be reachable again (the
    link comes back by itself) and goes back to it, whose key cache shares the run it has going:
    the handler runs once, and never at another agent (idempotent or not)."""
    a, b = await nodes.node("A"), await nodes.node("B")
    far = Gate("far", idempotent)
    await nodes.serve(far.agent, b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    handle = await client.submit("job.run", {"n": 1})
    await asyncio.wait_for(far.started.wait(), 5)
    await until(lambda: running(a, handle.task_id))  # A has heard B's ack
    near = Gate("near", idempotent)
    near.release.set()
    await nodes.serve(near.agent, a.url)
    await break_link(a, "B")
    # The link comes back by itself and the snapshot re-syncs.
    await until(lambda: a.peers.view()[0]["links"] >= 2 and
                view(a, "far")["state"] == "online")
    far.release.set()
    assert await handle.result(timeout=5) == {"n": 1, "by": "far"}
    task = await a.task(handle.task_id)
    assert task is not None
    # On a loaded machine the first invoke's ack can come after ack_timeout: that attempt is
    # 'undelivered' and goes to far again, whose key cache shares the run (runs stays 1).
    outcomes = [(t["agent"], t["outcome"]) for t in task["attempts"]
                if t["outcome"] != "undelivered"]
    assert outcomes == [("far", "lost"), ("far", "ok")]
    assert {t["agent"] for t in task["attempts"]} == {"far"}
    assert far.runs == 1 and near.runs == 0


async def test_a_timeout_at_a_cancels_the_attempt_at_b_and_frees_its_slot(
        nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    far = Gate("far", idempotent=False)
    await nodes.serve(far.agent, b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    with pytest.raises(ReachError) as err:
        await client.call("job.run", {"n": 2}, timeout=0.2)
    assert err.value.code == "timeout"
    await until(lambda: view(b, "far")["inflight"] == 0)
    assert view(a, "far")["inflight"] == 0 and far.runs == 1
    far.release.set()


async def test_forwarded_work_shares_the_agents_slots_with_local_callers(
        nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B", queue_wait=0.01)
    far = Gate("far", idempotent=True)
    far.agent.max_concurrency = 1
    await nodes.serve(far.agent, b.url)
    await link(a, b)
    remote = await nodes.client(a.url)
    handle = await remote.submit("job.run", {"n": 3})
    await asyncio.wait_for(far.started.wait(), 5)
    assert view(b, "far")["inflight"] == 1  # B counts A's attempt in the agent's slots
    local = await nodes.client(b.url)
    with pytest.raises(ReachError) as err:
        await local.call("job.run", {"n": 4}, timeout=2)
    assert err.value.code == "rejected"
    far.release.set()
    assert (await handle.result(timeout=5))["n"] == 3


async def test_an_attempt_too_large_for_the_peer_is_not_sent_and_the_link_stays(
        nodes: Nodes) -> None:
    a, b = await nodes.node("A", max_retries=0), await nodes.node("B", max_frame_bytes=4096)
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    with pytest.raises(ReachError) as raised:
        await client.call("text.echo", {"text": "x" * 8000}, timeout=2)
    # The params are at fault, not the agent: a final answer, no retry, no breaker fault.
    assert raised.value.code == "invalid_params" and "frame limit" in raised.value.message
    assert (await client.call("text.echo", {"text": "small"}, timeout=5))["by"] == "echo-b"
    assert [v["breaker"] for v in a.agents() if v["name"] == "echo-b"] == ["closed"]
    assert a.peers.view()[0]["links"] == 1  # never closed for it (1009 would drop them all)


async def test_an_idempotent_attempt_timed_out_at_a_is_stopped_at_b_once_its_task_ends(
        nodes: Nodes) -> None:
    """A completion timeout frees the attempt's slot at B at once but leaves the agent's run
    alone (a retry could join it); once the task has ended, A asks B to stop it, and B, which
    remembers what it gave up untold, tells the agent (docs/protocol.md §14, ``stop``)."""
    a, b = await nodes.node("A"), await nodes.node("B")
    held, agent = Held(), Agent("slow-read")
    agent.capability("job.read", idempotent=True, latency_ms=2000)(held.run)
    await nodes.serve(agent, b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    with pytest.raises(ReachError) as err:
        await client.call("job.read", {"n": 1}, timeout=0.2, max_retries=0)
    assert err.value.code == "timeout" and held.started.is_set()
    await until(lambda: view(b, "slow-read")["inflight"] == 0)
    await asyncio.wait_for(held.stopped.wait(), 5)  # the task ended: the run is stopped
