"""A dead letter that had a webhook, replayed by an operator, tells its new end too: the
receiver heard ``dead`` and then hears how the replay ended (the same task id, signed as
before). Loopback receiver, a real coordinator and agent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from notify_rig import FAST, LOOPBACK, QUICK, receiver, verifier, working

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


async def test_a_replayed_chain_step_tells_its_chains_new_end() -> None:
    """A chain's step that went dead told the chain's webhook ``dead`` (under its head's id);
    replaying that step tells the chain's new end, once. The receiver's path (often a
    webhook's secret) is not in the log line of the delivery given up on."""
    broken = {"on": True}
    async with receiver() as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK, max_retries=0) as reach, \
            flaky(reach.url, broken), working(reach.url):
        reach.pusher.backoff = QUICK
        async with Client.connect(reach.url, caller="cron") as client:
            head = await client.submit("echo.run", {"n": 5}, notify=hook.url,
                                       then=[{"capability": "job.run",
                                              "map": {"n": "/echo/n"}}])
            with pytest.raises(ReachError) as failed:
                await head.result(timeout=5)
            step = failed.value.details["chain"]
            first = await hook.one()
            hook.arrived.clear()
            view = await client.status(head.task_id)
            broken["on"] = False
            await reach.replay(view["chain"]["next"], wait=5)
            second = await hook.one()
            await asyncio.wait_for(reach.pusher.settled(), 5)
    assert step == {"head": head.task_id, "step": 2, "of": 2}
    assert (first.json["state"], first.json["chain"]["step"]) == ("dead", 2)
    assert (second.json["state"], second.json["result"]) == ("succeeded", {"n": 10})
    assert second.json["task_id"] == view["chain"]["next"] == first.json["task_id"]
    assert len(hook.got) == 2


async def test_a_given_up_delivery_is_logged_without_the_urls_path(
        caplog: pytest.LogCaptureFixture) -> None:
    """A webhook URL's path is often its only secret (a chat service's hooks): the warning
    names the receiver's scheme, host and port, not the path."""
    async with receiver() as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK) as reach, working(reach.url):
        reach.pusher.backoff = QUICK
        # (a path the receiver does not serve: 404, final, so the delivery is given up on)
        secret_path = hook.url.replace("/hook", "/services/T0/B0/s3cr3t")
        async with Client.connect(reach.url, caller="cron") as client:
            await (await client.submit("echo.run", {}, notify=secret_path)).result(timeout=5)
            with caplog.at_level(logging.WARNING, logger="reach.pushes"):
                await asyncio.wait_for(reach.pusher.settled(), 10)
    [line] = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert "s3cr3t" not in line and hook.url.split("/hook")[0] + "/…" in line
