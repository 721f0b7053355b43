"""The admin feed's refusals over a real loopback coordinator (reach/server/admin_session.py):
a frame that is not a command is answered and the feed carries on, bad arguments are
``invalid_params``, and a command that fails inside the coordinator still gets its reply."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import websockets
from conformance.rawpeer import agent, answer, caller, submit

from reach import Reach

WAIT = 2.0


class Feed:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def frame(self, kind: str, **match: Any) -> dict[str, Any]:
        async with asyncio.timeout(WAIT):
            while True:
                frame = json.loads(await self.ws.recv())
                if frame["type"] == kind and all(frame.get(k) == v for k, v in match.items()):
                    return dict(frame)


@pytest.fixture
async def reach() -> AsyncIterator[Reach]:
    async with Reach.start(http_port=None, heartbeat_interval=0.1) as coordinator:
        yield coordinator


@pytest.fixture
async def feed(reach: Reach) -> AsyncIterator[Feed]:
    async with websockets.connect(reach.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": reach.admin_token}))
        f = Feed(ws)
        await f.frame("snapshot")
        yield f


async def test_a_frame_that_is_not_a_command_is_refused_and_the_feed_goes_on(
        feed: Feed) -> None:
    await feed.ws.send(json.dumps({"v": 1, "type": "heartbeat"}))
    err = await feed.frame("error")
    assert err["error"]["code"] == "invalid_params"
    assert err["error"]["message"] == "the admin feed takes 'command' frames, not 'heartbeat'"
    await feed.ws.send(json.dumps({"v": 1, "type": "command", "id": 1, "action": "replay_filter",
                                   "args": {}}))
    reply = await feed.frame("reply", id=1)
    assert reply["ok"] is True and reply["result"] == {"replayed": []}


@pytest.mark.parametrize(("args", "why"), [
    ({}, "missing argument 'agent'"),
    ({"agent": "nobody"}, "no agent named 'nobody'"),
])
async def test_bad_arguments_are_invalid_params(feed: Feed, args: dict[str, Any],
                                                why: str) -> None:
    await feed.ws.send(json.dumps({"v": 1, "type": "command", "id": 2, "action": "drain",
                                   "args": args}))
    reply = await feed.frame("reply", id=2)
    assert reply["ok"] is False and reply["error"]["code"] == "invalid_params"
    assert why in reply["error"]["message"]


async def test_a_command_that_fails_inside_the_coordinator_still_replies(
        reach: Reach, feed: Feed, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(action: str, args: dict[str, Any]) -> Any:
        raise RuntimeError("a bug in the command")

    monkeypatch.setattr(reach.ops, "command", broken)
    with caplog.at_level(logging.ERROR, "reach.admin"):
        await feed.ws.send(json.dumps({"v": 1, "type": "command", "id": 3, "action": "drain",
                                       "args": {"agent": "w"}}))
        reply = await feed.frame("reply", id=3)
    assert reply["ok"] is False and reply["error"]["code"] == "reach_error"
    assert reply["error"]["message"] == \
        "'drain' failed inside the coordinator: RuntimeError('a bug in the command')"
    assert any("admin command 'drain' failed" in r.getMessage() for r in caplog.records)
    # The operator's action was recorded as failed, and the feed still answers.
    monkeypatch.undo()
    await feed.ws.send(json.dumps({"v": 1, "type": "command", "id": 4, "action": "replay_filter",
                                   "args": {}}))
    assert (await feed.frame("reply", id=4))["ok"] is True


async def test_an_operator_leaving_mid_command_cancels_the_wait_not_the_work(
        reach: Reach) -> None:
    """A ``replay`` waits (up to ``wait`` s) for the task to end. The operator closing the
    feed ends that wait at once; the replayed task goes on and finishes."""
    worker = await agent(reach.url, "w", [{"name": "job.run"}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {}, timeout=0.05, max_retries=0))
    tid = (await boss.expect("accepted", id=1))["task_id"]
    assert (await boss.outcome(1))["error"]["code"] == "timeout"
    await worker.expect("invoke")  # the first attempt, never answered
    ws = await websockets.connect(reach.url)
    await ws.send(json.dumps({"v": 1, "type": "admin", "token": reach.admin_token}))
    await Feed(ws).frame("snapshot")
    await ws.send(json.dumps({"v": 1, "type": "command", "id": 9, "action": "replay",
                              "args": {"task_id": tid, "wait": 30}}))
    invoke = await worker.expect("invoke", task_id=tid)  # the replay is running
    await ws.close()
    async with asyncio.timeout(2):  # the session ends now, not after the 30 s wait
        while any(type(s).__name__ == "AdminSession" for s in reach.channel.sessions):
            await asyncio.sleep(0.005)
    await answer(worker, invoke, "replayed")
    async with asyncio.timeout(2):
        while (await reach.task(tid) or {}).get("state") != "succeeded":
            await asyncio.sleep(0.005)
    await worker.close()
    await boss.close()
