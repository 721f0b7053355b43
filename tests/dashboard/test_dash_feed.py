"""The admin feed client against a small loopback websocket server that plays the coordinator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from dashboard.feed import AdminFeed, AdminRefused, CommandFailed, FeedClosed
from reach.wire import admin

Handler = Callable[[ServerConnection], Awaitable[None]]
SNAPSHOT = {"v": 1, "type": "snapshot", "at": 1.0, "agents": [],
            "coordinator": {"url": "ws://c", "version": "0.1.0", "started_at": 0.0,
                            "store": "memory"}}


@pytest.fixture
async def server() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers = []

    async def start(handler: Handler) -> str:
        srv = await serve(handler, "127.0.0.1", 0)
        servers.append(srv)
        port = next(iter(srv.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    yield start
    for srv in servers:
        srv.close()
        await srv.wait_closed()


async def coordinator(ws: ServerConnection) -> None:
    """Token "t"; snapshot, then one delta; commands answered (`slow` after `fast`)."""
    hello = json.loads(await ws.recv())
    if hello != {"v": 1, "type": "admin", "token": "t"}:
        await ws.send(json.dumps({"v": 1, "type": "error", "attempt": 0,
                                  "error": {"code": "unauthorized", "message": "bad token"}}))
        await ws.close(1008, "unauthorized")
        return
    await ws.send(json.dumps(SNAPSHOT))
    await ws.send(json.dumps({"v": 1, "type": "future-frame"}))
    await ws.send(json.dumps({"v": 1, "type": "delta", "at": 2.0}))
    held: list[dict[str, Any]] = []
    async for raw in ws:
        cmd = json.loads(raw)
        if cmd["action"] == "slow":
            held.append(cmd)
            continue
        if cmd["action"] == "fast":
            reply = {"v": 1, "type": "reply", "id": cmd["id"], "ok": True, "result": cmd["args"]}
            await ws.send(json.dumps(reply))
            for slow in held:
                await ws.send(json.dumps({"v": 1, "type": "reply", "id": slow["id"], "ok": True,
                                          "result": "slow done"}))
        elif cmd["action"] == "bad":
            await ws.send(json.dumps({"v": 1, "type": "reply", "id": cmd["id"], "ok": False,
                                      "error": {"code": "invalid_params", "message": "no"}}))
        elif cmd["action"] == "malformed":
            await ws.send(json.dumps({"v": 1, "type": "error", "id": cmd["id"], "attempt": 0,
                                      "error": {"code": "protocol_error", "message": "what"}}))
        elif cmd["action"] == "bye":
            await ws.close(1001, "going away")
            return
        await ws.send(json.dumps({"v": 1, "type": "delta", "at": 3.0}))


async def pump(feed: AdminFeed) -> None:
    """Keep receiving (as the dashboard's feed worker does) so replies get through."""
    while True:
        await feed.receive()


async def test_snapshot_then_deltas_unknown_frames_skipped(server: Any) -> None:
    feed = await AdminFeed.open(await server(coordinator), "t")
    try:
        snapshot = await feed.receive()
        assert isinstance(snapshot, admin.Snapshot) and snapshot.coordinator.url == "ws://c"
        delta = await feed.receive()
        assert isinstance(delta, admin.Delta) and delta.at == 2.0
        assert delta.model_fields_set == {"v", "type", "at"}
    finally:
        await feed.close()


@pytest.mark.parametrize(("raw", "why"), [
    (json.dumps({**SNAPSHOT, "coordinator": {}}), "bad frame from the coordinator: invalid "
                                                  "admin-feed frame: snapshot.coordinator.url"),
    (json.dumps({"v": 1, "type": "reply", "ok": True}), "bad frame.*reply.id"),
    ("{not json", "not JSON from the feed"),
])
async def test_a_frame_off_the_models_ends_the_connection(server: Any, raw: str,
                                                          why: str) -> None:
    async def sends(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(raw)
        await ws.wait_closed()

    feed = await AdminFeed.open(await server(sends), "t")
    with pytest.raises(FeedClosed, match=why):
        await feed.receive()
    with pytest.raises(FeedClosed):
        await feed.command("fast", {})


async def test_commands_get_their_own_replies_even_out_of_order(server: Any) -> None:
    feed = await AdminFeed.open(await server(coordinator), "t")
    reader = asyncio.create_task(pump(feed))
    try:
        slow = asyncio.create_task(feed.command("slow", {}))
        await asyncio.sleep(0.01)
        assert await feed.command("fast", {"n": 1}) == {"n": 1}
        assert await slow == "slow done"
        with pytest.raises(CommandFailed) as failed:
            await feed.command("bad", {})
        assert (failed.value.code, failed.value.message) == ("invalid_params", "no")
        with pytest.raises(CommandFailed, match="protocol_error"):
            await feed.command("malformed", {})
    finally:
        reader.cancel()
        await feed.close()


async def test_a_wrong_token_is_refused_not_retried(server: Any) -> None:
    feed = await AdminFeed.open(await server(coordinator), "wrong")
    with pytest.raises(AdminRefused, match="bad token"):
        await feed.receive()
    with pytest.raises(AdminRefused):
        await feed.command("fast", {})
    await feed.close()


async def test_close_1008_without_an_error_frame_is_a_refusal(server: Any) -> None:
    async def closes(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.close(1008, "admin token required")

    feed = await AdminFeed.open(await server(closes), "t")
    with pytest.raises(AdminRefused, match="admin token required"):
        await feed.receive()


async def test_the_coordinator_going_away_fails_pending_commands(server: Any) -> None:
    feed = await AdminFeed.open(await server(coordinator), "t")
    await feed.receive()
    pending = asyncio.create_task(feed.command("slow", {}))
    await asyncio.sleep(0.01)
    bye = asyncio.create_task(feed.command("bye", {}))
    with pytest.raises(FeedClosed, match="1001 going away"):
        while True:
            await feed.receive()
    for command in (pending, bye):
        with pytest.raises(FeedClosed):
            await command


async def test_nothing_listening_is_feed_closed() -> None:
    with pytest.raises(FeedClosed, match="cannot connect"):
        await AdminFeed.open("ws://127.0.0.1:9", "t", open_timeout=1.0)
