"""An operator's admin feed ending (reach/server/admin_session.py): whatever the feed held is
let go, over a real loopback coordinator. With nothing running, the event bus goes quiet again
(no subscription left, so publishing costs routing nothing) and the feed's pump stops; with
commands still running, each is cancelled, not left to finish for no one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import websockets

from reach import Reach

WAIT = 2.0


@pytest.fixture
async def reach() -> AsyncIterator[Reach]:
    async with Reach.start(http_port=None, heartbeat_interval=0.1) as coordinator:
        yield coordinator


async def frame(ws: Any, kind: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        while True:
            got = json.loads(await ws.recv())
            if got["type"] == kind:
                return dict(got)


async def open_feed(reach: Reach) -> Any:
    ws = await websockets.connect(reach.url)
    await ws.send(json.dumps({"v": 1, "type": "admin", "token": reach.admin_token}))
    await frame(ws, "snapshot")
    return ws


def feed_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "reach-admin-feed"]


async def until(pred: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not pred():
            await asyncio.sleep(0.005)


async def test_a_feed_that_leaves_idle_lets_the_event_bus_go_quiet(reach: Reach) -> None:
    bus = reach.gateway.events
    assert not bus.active  # no operator: events are not even built
    ws = await open_feed(reach)
    assert bus.active and len(feed_tasks()) == 1
    await ws.close()
    await until(lambda: not bus.active and not feed_tasks())
    assert not reach.channel.sessions


async def test_commands_still_running_when_the_operator_leaves_are_cancelled(
        reach: Reach, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    cancelled: list[str] = []

    async def slow(action: str, args: dict[str, Any]) -> Any:
        started.append(action)
        try:
            await asyncio.Event().wait()  # never set: only a cancel ends it
        except asyncio.CancelledError:
            cancelled.append(action)
            raise

    monkeypatch.setattr(reach.ops, "command", slow)
    ws = await open_feed(reach)
    for i, action in enumerate(("trace", "find")):
        await ws.send(json.dumps({"v": 1, "type": "command", "id": i, "action": action,
                                  "args": {}}))
    await until(lambda: started == ["trace", "find"])
    await ws.close()
    await until(lambda: not reach.channel.sessions)  # ended now, not when they would have
    assert sorted(cancelled) == ["find", "trace"]
    assert not reach.gateway.events.active and not feed_tasks()
