"""How the Python agent SDK meets the coordinator's replies of docs/protocol.md §2-§3 (issue 16):
a late-answer notice is taken quietly (no exception, nothing logged above debug), and a close
with 4000 (replaced) ends its serving instead of taking the name back."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import websockets

from reach import Agent, Client, Reach
from reach.testing import wait_until


async def test_a_late_answer_notice_is_taken_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reach.agent")
    agent = Agent("late-sdk")
    slow = [0.1]

    @agent.capability("sdk.late", latency_ms=20, idempotent=True)
    async def late() -> str:
        await asyncio.sleep(slow.pop() if slow else 0)
        return "done"

    async with Reach.start(heartbeat_interval=0.05) as reach:
        async with agent.connect(reach.url), Client.connect(reach.url) as client:
            # attempt 1 times out at 24 ms; the retry (same key, same agent) is answered
            # from the first run's outcome; the first run's late result gets the notice
            assert await client.call("sdk.late", max_retries=2) == "done"  # no caller deadline
            await wait_until(lambda: any("was given up" in r.getMessage()
                                         for r in caplog.records))
            assert agent.executions == 1
            assert await client.call("sdk.late", timeout=5) == "done"
    notices = [r for r in caplog.records if "was given up" in r.getMessage()]
    assert notices and all(r.levelno == logging.DEBUG for r in notices)
    assert not [r for r in caplog.records
                if r.name == "reach.agent" and r.levelno >= logging.WARNING]


async def test_the_agent_sdk_does_not_reconnect_after_4000(
        caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent("replaced-sdk", reconnect_base=0.01)

    @agent.capability("sdk.twin")
    async def twin() -> str:
        return "sdk"

    async with Reach.start(heartbeat_interval=0.05) as reach:
        await agent.connect(reach.url)
        try:
            async with websockets.connect(reach.url) as raw:
                await raw.send(json.dumps({
                    "v": 1, "type": "register", "name": "replaced-sdk",
                    "instance": agent.instance, "capabilities": [{"name": "sdk.twin"}]}))
                assert json.loads(await raw.recv())["type"] == "welcome"
                await wait_until(lambda: not agent.online.is_set())
                await asyncio.sleep(0.2)  # twenty reconnect delays: none is tried
                assert raw.protocol.close_rcvd is None  # still the agent's connection
                assert "not reconnecting" in caplog.text
        finally:
            await agent.close()
