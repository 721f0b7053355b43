"""The agent session's rarer paths over a real loopback coordinator, spoken raw: a connection
replaced while work is in flight on it (the work is lost there and goes to the new one), the
session closed through its port (``AgentLink.close``), and the bounded memory of given-up
attempts (the oldest is forgotten, a late answer to a recent one is still told)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conformance.rawpeer import Peer, agent, answer, caller, submit

from reach import Reach
from reach.server.agent_session import GIVEN_UP, AgentSession

JOB = {"name": "job.run", "idempotent": True}


@pytest.fixture
async def reach() -> AsyncIterator[Reach]:
    async with Reach.start(http_port=None, heartbeat_interval=0.1, ack_timeout=1.0,
                           drain_timeout=0.2) as coordinator:
        yield coordinator


def session_of(reach: Reach, name: str) -> AgentSession:
    [found] = [s for s in reach.channel.sessions
               if isinstance(s, AgentSession) and s.record is not None
               and s.record.name == name and s.record.link is s]
    return found


async def test_a_replaced_connection_loses_its_work_to_the_new_one(reach: Reach) -> None:
    old = await agent(reach.url, "w", [JOB], instance="proc-1")
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {"n": 1}))
    await boss.expect("accepted", id=1)
    first = await old.expect("invoke")
    stale = session_of(reach, "w")
    assert stale.pending
    new = await agent(reach.url, "w", [JOB], instance="proc-1")  # the same process, again
    code, reason = await old.closed()
    assert code == 4000 and reason == "replaced by a newer connection of the same agent"
    assert not stale.pending  # lost with the old connection
    again = await new.expect("invoke", task_id=first["task_id"])  # retried on the new one
    assert again["attempt"] > first["attempt"]
    await answer(new, again, "from the new connection")
    assert (await boss.outcome(1))["result"] == "from the new connection"
    # The old session ending did not mark the agent disconnected: the new one holds it.
    async with asyncio.timeout(2):
        while stale in reach.channel.sessions:
            await asyncio.sleep(0.005)
    assert [a["state"] for a in reach.agents()] == ["online"]
    await new.close()
    await boss.close()


async def test_closing_a_session_through_its_port_closes_the_socket(reach: Reach) -> None:
    peer = await agent(reach.url, "w", [JOB])
    await session_of(reach, "w").close("operator asked")
    assert await peer.closed() == (1000, "operator asked")


async def test_given_up_attempts_are_remembered_within_a_bound(reach: Reach) -> None:
    peer = await agent(reach.url, "w", [JOB])
    session = session_of(reach, "w")
    for n in range(GIVEN_UP):  # a long history of attempts given up before
        session.given_up[(f"{n:032x}", 1)] = None
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {}, timeout=0.05, max_retries=0))
    invoke = await peer.expect("invoke")
    assert (await boss.outcome(1))["error"]["code"] == "timeout"
    async with asyncio.timeout(2):
        while (invoke["task_id"], invoke["attempt"]) not in session.given_up:
            await asyncio.sleep(0.005)
    assert len(session.given_up) == GIVEN_UP and (f"{0:032x}", 1) not in session.given_up
    # A late answer to it is told once why it is discarded.
    await answer(peer, invoke, "too late")
    told = await peer.expect("error", task_id=invoke["task_id"])
    assert told["error"]["code"] == "timeout" and "was given up" in told["error"]["message"]
    await peer.close()
    await boss.close()


async def test_a_registration_the_registry_refuses_is_invalid_params_and_closed(
        reach: Reach) -> None:
    peer = await Peer.open(reach.url)
    await peer.send({"v": 1, "type": "register", "name": "w",
                     "capabilities": [{"name": "job.run"}, {"name": "Job.Run"}]})
    refused = (await peer.recv())["error"]
    assert refused["code"] == "invalid_params"
    assert refused["message"] == \
        "registration refused: capability 'Job.Run' is declared twice (as 'job.run')"
    assert refused["details"] == {"reason": refused["message"][len("registration refused: "):]}
    assert (await peer.closed())[0] == 1008
    assert reach.agents() == []  # nothing of it was registered


async def test_a_small_registration_over_max_capabilities_is_refused_by_its_count() -> None:
    async with Reach.start(http_port=None, max_capabilities=2) as reach:
        peer = await Peer.open(reach.url)
        await peer.send({"v": 1, "type": "register", "name": "w",
                         "capabilities": [{"name": f"job.n{i}"} for i in range(3)]})
        refused = (await peer.recv())["error"]
        assert refused["code"] == "invalid_params"
        assert refused["details"] == {"limit": 2, "reason": "3 capabilities, over the limit of 2"}
        assert (await peer.closed())[0] == 1008
        assert reach.agents() == []


async def test_an_answer_racing_its_own_timeout_is_told_it_was_given_up(reach: Reach) -> None:
    """The attempt times out in the same turn of the loop as its answer is read: the session
    sees a delivery already given up (the gateway has not yet said so) and tells the agent,
    once, that the answer is discarded; the caller gets the timeout."""
    peer = await agent(reach.url, "w", [JOB])
    session = session_of(reach, "w")
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {}, max_retries=0))
    invoke = await peer.expect("invoke")
    delivery: Any = session.pending[(invoke["task_id"], invoke["attempt"])]
    ws: Any = session.ws
    read = ws.data_received

    def deadline_first(data: bytes) -> None:  # its deadline, in the turn the answer is read
        ws.data_received = read
        delivery.resolve("timeout")
        read(data)
    ws.data_received = deadline_first  # (the transport hands the socket's bytes to it)
    await answer(peer, invoke, "just too late")
    told = await peer.expect("error", task_id=invoke["task_id"])
    assert told["error"]["code"] == "timeout" and "was given up" in told["error"]["message"]
    assert (invoke["task_id"], invoke["attempt"]) in session.given_up
    outcome = await boss.outcome(1)
    assert outcome["type"] == "error" and outcome["error"]["code"] == "timeout"
    await peer.close()
    await boss.close()


async def test_a_connection_that_can_no_longer_carry_frames_gets_no_work(reach: Reach) -> None:
    """Once its outbox has given up (as on a slow reader, before the socket is gone), the
    session refuses each delivery: the invoke is never sent, and the task goes to an agent
    that can take it."""
    stuck = await agent(reach.url, "stuck", [JOB])
    session_of(reach, "stuck").out.closed = True  # what Outbox._overflow leaves behind
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {"n": 1}, max_retries=3))
    await boss.expect("accepted", id=1)
    good = await agent(reach.url, "good", [JOB])
    invoke = await good.expect("invoke")
    await answer(good, invoke, "from good")
    assert (await boss.outcome(1))["result"] == "from good"
    await stuck.silent(0.02)  # nothing was sent on the stuck connection
    task = await reach.task(invoke["task_id"])
    assert task is not None and task["attempts"][0]["agent"] == "stuck"
    await good.close()
    await stuck.close()
    await boss.close()
