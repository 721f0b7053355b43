"""``reach.Admin`` against coordinators that misbehave, on a loopback websocket that speaks the
admin feed by hand: one that never sends its snapshot (``Unavailable`` within
``open_timeout``, not a hang), one that sends a frame type newer than this client (skipped)
or a broken frame (the session ends with a ``ProtocolError``), one that goes away mid-session
(commands waiting fail at once); and the session's other forms: a URL that is not a
websocket URL, ``async with`` on an opened session, the discarded letters' filters, a long
session keeping the newest traces only."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from dashboard import sample
from reach import Admin, InvalidParams, ProtocolError, Unavailable

Script = Callable[[ServerConnection], Awaitable[None]]


@asynccontextmanager
async def feed(script: Script) -> AsyncIterator[str]:
    """A websocket server on loopback that reads the hello and then runs ``script``."""
    async def handler(ws: ServerConnection) -> None:
        hello = json.loads(await ws.recv())
        assert hello["type"] == "admin"
        await script(ws)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


async def replies(ws: ServerConnection, answer: Callable[[dict[str, Any]], Any]) -> None:
    """Answer each command frame with ``answer(command)`` as its result."""
    async for raw in ws:
        command = json.loads(raw)
        await ws.send(json.dumps({"v": 1, "type": "reply", "id": command["id"], "ok": True,
                                  "result": answer(command)}))


async def test_a_coordinator_that_sends_no_snapshot_is_unavailable_in_time() -> None:
    async def silent(ws: ServerConnection) -> None:
        await ws.wait_closed()

    async with feed(silent) as url:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(Unavailable, match="no admin snapshot within 0.2s"):
            await Admin.connect(url, token="t", open_timeout=0.2)
        assert loop.time() - started < 2.0


async def test_a_newer_frame_type_is_skipped_and_a_broken_frame_ends_the_session() -> None:
    commands: list[dict[str, Any]] = []

    async def script(ws: ServerConnection) -> None:
        await ws.send(json.dumps(sample.snapshot()))
        await ws.send(json.dumps({"v": 1, "type": "weather_report", "sunny": True}))

        def answer(command: dict[str, Any]) -> Any:
            commands.append(command)
            if command["action"] == "dead_letters":
                return {"dead_letters": [sample.DEAD_LETTERS[0]]}
            return {"phrases": []}
        reading = asyncio.create_task(replies(ws, answer))
        await asyncio.sleep(0.3)
        await ws.send("{not json")
        await reading

    async with feed(script) as url:
        admin = await Admin.connect(url, token="t")
        async with admin:  # an opened session closes at the end of the block too
            assert [a["name"] for a in await admin.agents()][:2] == ["billing", "orders-1"]
            assert await admin.phrases() == []  # the unknown frame was skipped
            kept = await admin.dead_letters(capability="orders.write", agent="orders-2",
                                            error="timeout", discarded=True)
            assert kept == [sample.DEAD_LETTERS[0]]
            assert commands[-1]["args"] == {"discarded": True, "capability": "orders.write",
                                            "agent": "orders-2", "error": "timeout"}
            await asyncio.sleep(0.5)  # the broken frame arrives: the session ends, saying so
            with pytest.raises(ProtocolError, match="invalid admin-feed frame"):
                await admin.agents()


async def test_commands_waiting_when_the_coordinator_goes_fail_at_once() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(json.dumps(sample.snapshot()))
        await ws.recv()  # a command: never answered, the connection is dropped
        await ws.close()

    async with feed(script) as url:
        admin = await Admin.connect(url, token="t")
        try:
            with pytest.raises(Unavailable, match="lost|closed"):
                await asyncio.wait_for(admin.find("abcdef"), 5)
            with pytest.raises(Unavailable):
                await admin.trace("abcdef")  # and the next one, before it is sent
        finally:
            await admin.close()
            await admin.close()  # twice is fine


async def test_a_long_session_keeps_the_newest_traces() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(json.dumps(sample.snapshot()))
        traces = [{"trace_id": f"{n:032x}", "root": "x.y", "tasks": 1,
                   "started_at": sample.AT + n, "state": "succeeded"} for n in range(1200)]
        await ws.send(json.dumps({"v": 1, "type": "delta", "at": sample.AT + 2000,
                                  "agents": [], "traces": traces, "dead_letters": [],
                                  "resolved": [], "dropped": 0}))
        await replies(ws, lambda command: {})

    async with feed(script) as url, Admin.connect(url, token="t") as admin:
        async with asyncio.timeout(5):
            while not any(t["trace_id"] == f"{1199:032x}" for t in await admin.traces()):
                await admin.changed(0.5)
        traces = await admin.traces()
        assert traces[0]["trace_id"] == f"{1199:032x}"  # newest first
        assert len(traces) < 1200 and f"{0:032x}" not in {t["trace_id"] for t in traces}


async def test_not_a_websocket_url_is_invalid_params() -> None:
    with pytest.raises(InvalidParams, match="not a websocket URL"):
        await Admin.connect("http://127.0.0.1:1/admin", token="t")
