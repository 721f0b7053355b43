"""Every attempt of one Reach task sends the same A2A message (its id from the task id and
idempotency key), so a remote that keys on the message id — another Reach's A2A door —
joins a retry to the run under way instead of running the work twice; an idempotent
attempt past its timeout is therefore left running for its retry, and told to stop only
once the Reach task ends."""

from __future__ import annotations

import asyncio
from typing import Any

from a2a_adapter.conftest import FAST, served
from a2a_adapter.remote_agent import Remote

from reach import Agent, Client, Reach
from reach.adapters import A2AAgent
from reach.core.backoff import Backoff
from reach.errors import ReachError

QUICK_RETRIES: dict[str, Any] = dict(backoff=Backoff(base=0.01, cap=0.02), max_retries=20)


async def _attempts(reach: Reach, trace_id: str, n: int) -> None:
    """Wait (bounded) until the task of ``trace_id`` has been dispatched ``n`` times."""
    async with asyncio.timeout(10):
        while sum(e["state"] == "dispatched" for e in reach.trace(trace_id)) < n:
            await asyncio.sleep(0.01)


async def test_an_idempotent_retry_at_a_remote_reach_runs_once_there() -> None:
    async with Reach.start(**FAST, a2a=True) as far:
        assert far.a2a_url is not None
        agent, runs, go = Agent("worker", reconnect_base=0.02), list[int](), asyncio.Event()

        @agent.capability("report.read", idempotent=True)
        async def read() -> dict[str, int]:
            runs.append(1)
            await go.wait()
            return {"runs": len(runs)}
        await agent.connect(far.url)
        try:
            async with Reach.start(**FAST, **QUICK_RETRIES) as near:
                # declared fast here: each attempt times out after 60 ms and is retried
                await near.attach(A2AAgent("far", far.a2a_url, skills={
                    "report.read": {"idempotent": True, "latency_ms": 50}}))
                async with Client.connect(near.url) as client:
                    handle = await client.submit("far.report.read", {})
                    await _attempts(near, handle.trace_id, 3)  # two retries sent
                    go.set()
                    assert await handle.result(timeout=10) == {"runs": 1}
            assert runs == [1]  # the retries joined the first run at the far door
        finally:
            await agent.close(drain=0.2)


async def test_an_idempotent_attempt_past_its_timeout_is_stopped_when_the_task_ends() -> None:
    remote = Remote(streaming=True)
    async with served(remote) as url, Reach.start(**FAST, **{
            **QUICK_RETRIES, "max_retries": 1}) as reach:
        await reach.attach(A2AAgent("remote", url, skills={
            "hang": {"idempotent": True, "latency_ms": 50}}))
        async with Client.connect(reach.url, "tester") as client:
            handle = await client.submit("remote.hang", {})
            try:
                await handle.result(timeout=10)
            except ReachError as exc:
                assert exc.code in ("timeout", "task_failed")
            else:  # pragma: no cover — a hang never answers
                raise AssertionError("remote.hang answered")
        # this agent does not key on the message id: each attempt is a task of its own,
        # and each is stopped once the Reach task has ended (not left running there)
        async with asyncio.timeout(5):
            while len(remote.cancelled) < 2:
                await asyncio.sleep(0.01)
        assert len(set(remote.cancelled)) == 2
