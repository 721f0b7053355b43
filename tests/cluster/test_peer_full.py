"""An agent held by another node and shared by both nodes' callers: when its holder refuses a
forwarded attempt for want of a free slot, the calling node waits or fails over as for an
agent saturated here, and never counts it as the agent's fault (policy's "full" outcome)."""

from __future__ import annotations

import asyncio
from typing import Any

from peering import Nodes, link, until, view

from reach import Agent, Client
from reach.core import policy
from reach.core.agents import FULL, routable
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.tasks import Outcome
from reach.wire.protocol import CapabilitySpec

CALLS = 16  # per node, at an agent with 2 slots


def busy_agent() -> Agent:
    agent = Agent("busy", max_concurrency=2)

    @agent.capability("job.run", idempotent=True, latency_ms=200)
    async def run(n: int) -> dict[str, int]:
        await asyncio.sleep(0.01)
        return {"n": n}

    @agent.capability("job.crash", latency_ms=200)
    async def crash(n: int) -> None:
        raise RuntimeError("disk full")

    return agent


async def burst(client: Client, base: int) -> list[Any]:
    return list(await asyncio.gather(*(client.call("job.run", {"n": base + i}, timeout=20)
                                       for i in range(CALLS))))


async def test_contention_on_a_shared_agent_never_opens_its_breaker_at_the_caller(
        nodes: Nodes) -> None:
    # Liveness is not what this tests: a loaded machine that stalls the agent's 50 ms beats
    # for 0.2 s must not make it suspected (then calls fail for that reason instead).
    lax = dict(queue_wait=15.0, suspect_after=40, offline_after=60)
    a, b = await nodes.node("A", **lax), await nodes.node("B", **lax)
    await nodes.serve(busy_agent(), b.url)
    await link(a, b)
    at_a, at_b = await nodes.client(a.url), await nodes.client(b.url, caller="local")
    local = asyncio.ensure_future(burst(at_b, 1000))
    try:
        await until(lambda: view(b, "busy")["inflight"] == 2)  # B's own callers fill it
        remote = await burst(at_a, 0)  # A's router sees room: its first tries are refused
    finally:
        done = await asyncio.gather(local, return_exceptions=True)
    assert sorted(r["n"] for r in remote) == list(range(CALLS))
    assert sorted(r["n"] for r in done[0]) == list(range(1000, 1000 + CALLS))
    record = a.registry.by_name["busy"]
    assert record.calls > CALLS  # some attempts were refused at B ...
    assert record.faults == 0 and record.breaker.state.value == "closed"  # ... none a fault
    # A real fault still counts against the agent at the calling node.
    try:
        await at_a.call("job.crash", {"n": 1}, timeout=5)
    except Exception as exc:
        assert "disk full" in str(exc)
    else:
        raise AssertionError("the crash answered")
    assert record.faults == 1


def test_full_is_neither_a_fault_nor_a_hop() -> None:
    verdict = policy.classify("full", None, acked=False, caller_bound=False)
    assert (verdict.full, verdict.healthy, verdict.judged) == (True, True, False)
    assert verdict.outcome is Outcome.UNDELIVERED
    tries = policy.Tries(max_retries=0, hops=10_000)  # far past the hop cap
    assert policy.after_attempt(verdict, tries, idempotent=False,
                                others_left=False) == policy.FailOver(free=True)
    refused = policy.classify("undelivered", None, acked=False, caller_bound=False)
    assert not refused.full and not refused.healthy  # a real refusal is still judged


def test_a_holders_full_word_keeps_the_agent_full_until_it_reports_room() -> None:
    registry = Registry(LivenessPolicy(interval=1.0))
    seen: list[str] = []
    registry.listen(lambda r: seen.append(r.name))
    spec = CapabilitySpec(name="job.run", params_schema={"type": "object"})
    record = registry.register(agent_id="x", name="busy", version="1", max_concurrency=2,
                               specs=[spec], link=None, now=0.0).record
    seen.clear()
    assert record.room("job.run")
    registry.holder_full(record, True)
    assert not record.room("job.run") and routable(record, "job.run") == FULL
    assert seen == []  # nothing freed: nobody woken
    registry.holder_full(record, False)
    assert record.room("job.run") and seen == ["busy"]  # room again: slot waiters wake
