"""A dead letter that had a webhook, replayed by an operator, tells its new end too: the
receiver heard ``dead`` and then hears how the replay ended (the same task id, signed as
before). Loopback receiver, a real coordinator and agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from notify_rig import FAST, LOOPBACK, receiver, verifier

from reach import Agent, Client, Reach, ReachError


@asynccontextmanager
async def flaky(url: str, broken: dict[str, bool]) -> AsyncIterator[Agent]:
    agent = Agent("flaky", reconnect_base=0.02)

    @agent.capability("job.run", idempotent=True)
    async def run(n: int) -> dict[str, int]:
        if broken["on"]:
            raise RuntimeError("the disk is full")
        return {"n": n * 2}

    await agent.connect(url)
    try:
        yield agent
    finally:
        await agent.close(drain=0.1)


async def test_a_replayed_dead_letter_tells_its_new_end() -> None:
    verify, broken = verifier(), {"on": True}
    async with receiver() as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK, max_retries=0) as reach, \
            flaky(reach.url, broken):
        async with Client.connect(reach.url, caller="cron") as client:
            handle = await client.submit("job.run", {"n": 21}, notify=hook.url)
            try:
                await handle.result(timeout=5)
            except ReachError:
                pass
            first = await hook.one()
            hook.arrived.clear()
            broken["on"] = False
            await reach.replay(handle.task_id, wait=5)
            second = await hook.one()
            await asyncio.wait_for(reach.pusher.settled(), 5)
        assert reach.notify_secret is not None
        secret = reach.notify_secret
    assert (first.json["task_id"], first.json["state"]) == (handle.task_id, "dead")
    assert (second.json["task_id"], second.json["state"]) == (handle.task_id, "succeeded")
    assert second.json["result"] == {"n": 42}
    assert verify(secret, second.headers, second.body)
    assert len(hook.got) == 2  # once for each end, not again
