"""Frames handed to their session as they come off the socket (reach.wire.inbound): the
order a peer sent them in is the order they are handled in, whatever mix of whole messages,
fragmented ones and bursts past one read's share reaches the coordinator; a bad frame is
answered; a bug while handling one ends that session alone. A real coordinator and raw
websocket peers (tests/conformance/rawpeer.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from conformance.rawpeer import Peer, agent, answer, caller, submit
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

from reach import Reach
from reach.config import Settings
from reach.server.keepalive import PacedKeepalive
from reach.server.session import Session
from reach.wire.inbound import YIELD_EVERY

JOB = {"name": "job.run", "idempotent": True}


@pytest.fixture
async def reach() -> AsyncIterator[Reach]:
    async with Reach.start(http_port=None, heartbeat_interval=0.1, drain_timeout=0.2) as r:
        yield r


async def accepted(peer: Peer, ids: range) -> dict[int, dict[str, Any]]:
    """The ``accepted`` answer of each submit in ``ids``."""
    got: dict[int, dict[str, Any]] = {}
    for i in ids:
        got[i] = await peer.expect("accepted", id=i)
    return got


async def test_submits_sharing_a_key_are_handled_in_the_order_they_were_sent(
        reach: Reach) -> None:
    """The first of many submits under one key, fragmented, is the one accepted; each one
    after it (whole, sent without waiting, more than one read hands over at once) is its
    duplicate: none overtook it, nor one another."""
    await agent(reach.url, "w", [JOB])
    boss = await caller(reach.url)
    first = json.dumps(submit(1, "job.run", {"n": 1}, idempotency_key="k"))
    await boss.ws.send(iter([first[:10], first[10:30], first[30:]]))  # three fragments
    many = 3 * YIELD_EVERY
    for i in range(2, many + 2):
        await boss.send(submit(i, "job.run", {"n": 1}, idempotency_key="k"))
    got = await accepted(boss, range(1, many + 2))
    assert got[1].get("duplicate") in (None, False)
    assert all(got[i]["duplicate"] is True for i in range(2, many + 2))
    assert {frame["task_id"] for frame in got.values()} == {got[1]["task_id"]}
    await boss.close()


async def test_a_fragment_queued_between_whole_messages_keeps_its_place(reach: Reach) -> None:
    """Whole, fragmented, whole: three tasks, accepted in the order sent, and a bad frame
    among them is answered in its place too."""
    await agent(reach.url, "w", [JOB])
    boss = await caller(reach.url)
    await boss.send(submit(1, "job.run", {"n": 1}, idempotency_key="a"))
    second = json.dumps(submit(2, "job.run", {"n": 1}, idempotency_key="a"))
    await boss.ws.send(iter([second[:7], second[7:]]))
    await boss.send('{"v": 1, "type": "submit", "id": 3, "capability": 5}')
    await boss.send(submit(4, "job.run", {"n": 1}, idempotency_key="a"))
    one = await boss.expect("accepted", id=1)
    two = await boss.expect("accepted", id=2)
    bad = await boss.expect("error", id=3)
    assert bad["error"]["code"] == "protocol_error"
    four = await boss.expect("accepted", id=4)
    assert one.get("duplicate") in (None, False)
    assert two["duplicate"] is four["duplicate"] is True
    assert two["task_id"] == four["task_id"] == one["task_id"]
    await boss.close()


async def test_a_bug_while_handling_a_frame_ends_that_session_alone(
        reach: Reach, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a refusal: an exception no rule expected. That caller's connection ends (the
    coordinator cannot tell what it did with the frame); every other peer carries on."""
    peer = await agent(reach.url, "w", [JOB])
    boss, other = await caller(reach.url, "boss"), await caller(reach.url, "other")
    accept = reach.gateway.accept

    def broken(request: Any, sink: Any = None) -> Any:
        if request.caller == "boss":
            raise RuntimeError("a bug in accept")
        return accept(request, sink)
    monkeypatch.setattr(reach.gateway, "accept", broken)
    await boss.send(submit(1, "job.run", {"n": 1}))
    code, _ = await boss.closed()
    assert code == 1011
    await other.send(submit(1, "job.run", {"n": 2}))
    invoke = await peer.expect("invoke")
    await answer(peer, invoke, "fine")
    assert (await other.outcome(1))["result"] == "fine"
    await other.close()


class Paced(Session):
    """A session whose pacing the test holds (the hooks a caller session overrides)."""

    def __init__(self, ws: Any) -> None:
        super().__init__(cast(Any, SimpleNamespace(settings=Settings())), ws)
        self.seen: list[str] = []
        self.hold = False
        self.release = asyncio.Event()

    def _held(self) -> bool:
        return self.hold

    def _waits(self) -> bool:
        return self.hold

    async def _backlog(self) -> None:
        await self.release.wait()
        self.hold = False


async def test_frames_that_come_while_a_session_holds_off_are_read_first_and_in_order(
) -> None:
    """A session that holds off (its backlog) after a frame handed over directly: the frames
    that arrive meanwhile queue, and once it reads again they come before any later one."""
    sessions: list[Paced] = []

    async def handler(ws: Any) -> None:
        session = Paced(ws)
        sessions.append(session)
        await session._frames(session.seen.append, parse=lambda raw: json.loads(raw)["n"])

    async with serve(handler, "127.0.0.1", 0, create_connection=PacedKeepalive) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as ws:

            async def seen(count: int) -> list[str]:
                async with asyncio.timeout(2):
                    while len(sessions[0].seen) < count:
                        await asyncio.sleep(0.001)
                return sessions[0].seen

            await ws.send(json.dumps({"n": "a"}))
            await seen(1)
            sessions[0].hold = True  # its next frame makes it hold off
            await ws.send(json.dumps({"n": "b"}))
            await seen(2)
            for n in "cde":  # while it waits: they queue
                await ws.send(json.dumps({"n": n}))
            await asyncio.sleep(0.05)
            assert sessions[0].seen == ["a", "b"]
            sessions[0].release.set()
            await seen(5)
            await ws.send(json.dumps({"n": "f"}))
            assert await seen(6) == ["a", "b", "c", "d", "e", "f"]
