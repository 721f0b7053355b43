"""docs/protocol.md §3 and §8, at most once: work that is not idempotent is never handed to a
second agent while the first may have it. A late ack is waited for (the ack timeout is a
suspicion, not proof); a connection lost before the ack sends the work back to that agent
alone, once it reconnects as the same process (its key cache answers), and otherwise ends
the task as unavailable, to be checked and replayed, rather than run a second time.

The incident behind it: a receipt delayed by a busy agent, a retry elsewhere, inventory
written twice (issue 27; the bad-deploy drill once saw a non-idempotent key run twice)."""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import Peer, agent, answer, caller, submit, wait_state

from reach import Reach

# Not idempotent (the default); declared long, as the tests' waits are for the ack alone (at
# 300 ms a slow host answered the late-ack test's attempt after its completion timeout)
WRITE = {"name": "conf.write", "latency_ms": 60_000}
QUICK_ACK = {"heartbeat_interval": 1.0, "ack_timeout": 0.05}


async def either(*peers: Peer) -> tuple[Peer, Peer, dict[str, Any]]:
    """The peer that got the invoke, the other one, and the invoke."""
    waits = {asyncio.ensure_future(p.expect("invoke")): p for p in peers}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for fut in pending:
        fut.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    fut = done.pop()
    got = waits[fut]
    return got, next(p for p in peers if p is not got), fut.result()


async def test_a_late_ack_is_waited_for_and_the_work_runs_once() -> None:
    """No ack within ``ack_timeout``: the attempt stays with its agent (no fail-over, no
    late-answer notice), and its late ack and result finish the task."""
    async with Reach.start(**QUICK_ACK) as reach:
        a = await agent(reach.url, "a", [WRITE])
        b = await agent(reach.url, "b", [WRITE])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", {"sku": 7}, max_retries=2))
        busy, other, invoke = await either(a, b)
        await asyncio.sleep(0.2)  # four ack timeouts pass: the agent's loop was busy
        await busy.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
        await answer(busy, invoke, "written once")
        outcome = await boss.outcome(1)
        assert outcome["type"] == "result" and outcome["result"] == "written once"
        await busy.silent(0.05)  # no "undelivered" notice: nothing was given up
        await other.silent(0.05)  # and the other agent never saw it
        task = await reach.task(invoke["task_id"])
        assert [a["outcome"] for a in task["attempts"]] == ["ok"]


async def test_an_idempotent_late_ack_still_fails_over_at_once() -> None:
    """Running twice is harmless for an idempotent capability: the ack timeout sends it to
    the other agent, and the late ack is told ``undelivered``."""
    async with Reach.start(**QUICK_ACK) as reach:
        spec = {**WRITE, "idempotent": True}
        a = await agent(reach.url, "a", [spec])
        b = await agent(reach.url, "b", [spec])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", max_retries=2))
        slow, other, first = await either(a, b)
        second = await other.expect("invoke")
        assert second["task_id"] == first["task_id"] and second["attempt"] == 2
        await answer(other, second, "elsewhere")
        assert (await boss.outcome(1))["result"] == "elsewhere"
        await slow.send({"v": 1, "type": "ack", "task_id": first["task_id"], "attempt": 1})
        notice = await slow.expect("error")
        assert notice["error"]["details"]["reason"] == "undelivered"


async def test_a_connection_lost_before_the_ack_goes_back_to_that_agent_alone() -> None:
    """The agent's connection drops after the invoke left and before any ack: the same
    process reconnecting (same ``instance``) gets the invoke again with the same idempotency
    key, and no other agent gets it."""
    async with Reach.start(**QUICK_ACK) as reach:
        a = await agent(reach.url, "a", [WRITE], instance="a-1")
        b = await agent(reach.url, "b", [WRITE], instance="b-1")
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", {"sku": 7}, max_retries=0))
        lost, other, first = await either(a, b)
        name = "a" if lost is a else "b"
        await lost.close()  # a network blip: the invoke may have been read
        back = await agent(reach.url, name, [WRITE], instance=f"{name}-1")
        again = await back.expect("invoke")
        assert (again["task_id"], again["attempt"]) == (first["task_id"], 2)
        assert again["idempotency_key"] == first["idempotency_key"]
        await answer(back, again, "from the key cache")
        assert (await boss.outcome(1))["result"] == "from the key cache"
        await other.silent(0.05)


async def test_an_agent_back_as_another_process_is_not_sent_it_again() -> None:
    """A new process cannot know whether the old one ran it: the task ends ``unavailable``
    with what to do next, and no agent gets it a second time."""
    async with Reach.start(**QUICK_ACK) as reach:
        a = await agent(reach.url, "a", [WRITE], instance="a-1")
        b = await agent(reach.url, "b", [WRITE], instance="b-1")
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", max_retries=3))
        lost, other, _ = await either(a, b)
        name = "a" if lost is a else "b"
        await lost.close()
        await wait_state(reach, name, "suspected")
        back = await agent(reach.url, name, [WRITE], instance=f"{name}-2")
        error = (await boss.outcome(1))["error"]
        assert error["code"] == "unavailable"
        assert "may have done the work" in error["message"]
        assert "not idempotent" in error["message"]
        await back.silent(0.05)
        await other.silent(0.05)


async def test_an_agent_that_never_said_which_process_it_is_is_not_sent_it_again() -> None:
    """Without an ``instance`` a reconnect cannot be told from a new process: the task
    ends at once, ``unavailable``, naming the attempt and the agent."""
    async with Reach.start(**QUICK_ACK) as reach:
        a = await agent(reach.url, "a", [WRITE])
        b = await agent(reach.url, "b", [WRITE])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", max_retries=3))
        lost, other, _ = await either(a, b)
        await lost.close()
        error = (await boss.outcome(1))["error"]
        assert error["code"] == "unavailable"
        assert "went away before it acknowledged attempt 1" in error["message"]
        assert "replay it" in error["message"]
        await other.silent(0.05)
