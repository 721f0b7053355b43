"""Two coordinators on one PostgreSQL database, one key: the second coordinator's submit is
answered as a duplicate of the first's task, through each edge (the gateway, the websocket
caller session, the REST front door), and the agent runs the work once."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from reach import Agent, Client, Reach
from reach.core.tasks import SubmitRequest


async def test_a_key_accepted_on_one_coordinator_is_a_duplicate_on_the_other(
        pg_url: str) -> None:
    runs: list[int] = []
    a = await Reach.start(store=pg_url)
    b = await Reach.start(store=pg_url)
    agents: list[Agent] = []
    try:
        for name, reach in (("counter-a", a), ("counter-b", b)):
            # (two names: one name registered on two coordinators clashes on the agents'
            # name index until the cluster runtime shares identities between nodes)
            agent = Agent(name)

            @agent.capability("count.run", idempotent=True)
            async def run(n: int) -> int:
                runs.append(n)
                return n

            await agent.connect(reach.url)
            agents.append(agent)
        async with await Client.connect(a.url, caller="planner") as on_a, \
                await Client.connect(b.url, caller="planner") as on_b:
            first = await on_a.submit("count.run", {"n": 1}, idempotency_key="once")
            assert await first.result(10) == 1
            again = await on_b.submit("count.run", {"n": 1}, idempotency_key="once")
            assert again.duplicate and again.task_id == first.task_id
            # the second coordinator now knows the key: answered from its memory
            task, duplicate = await b.gateway.submit(
                SubmitRequest("count.run", {"n": 1}, "planner", "once"))
            assert duplicate and task.task_id == first.task_id
            # the gateway's own path, for a key b never saw
            second = await on_a.submit("count.run", {"n": 2}, idempotency_key="twice")
            assert await second.result(10) == 2
            task, duplicate = await b.gateway.submit(
                SubmitRequest("count.run", {"n": 2}, "planner", "twice"))
            assert duplicate and task.task_id == second.task_id
            # and the REST front door
            third = await on_a.submit("count.run", {"n": 3}, idempotency_key="thrice")
            assert await third.result(10) == 3
            assert b.http_url is not None
            async with httpx.AsyncClient(base_url=b.http_url) as http:
                resp = await http.post("/v1/tasks", json={
                    "capability": "count.run", "params": {"n": 3}},
                    headers={"X-Reach-Caller": "planner", "Idempotency-Key": "thrice"})
            body: dict[str, Any] = resp.json()
            assert resp.status_code < 300, body
            assert body["task_id"] == third.task_id and body.get("duplicate") is True
        await asyncio.sleep(0.05)
        assert sorted(runs) == [1, 2, 3]  # each key ran once across both coordinators
    finally:
        for agent in agents:
            await agent.close()
        await b.stop()
        await a.stop()
