"""A hostile holder: what a peer sends back over a link this node opened is bounded and
checked too. Bad frames and rows are logged and ignored, the node's own agents are never
moved by them, and the node carries on serving."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import websockets
from peering import Nodes, challenge, echo_agent, until, view
from websockets.asyncio.server import ServerConnection

SPEC = {"name": "text.echo", "idempotent": True, "latency_ms": 200}


def row(agent_id: str, name: str, **fields: Any) -> dict[str, Any]:
    return {"agent_id": agent_id, "name": name, "capabilities": [SPEC], **fields}


async def test_bad_frames_from_a_holder_are_ignored_and_the_node_carries_on(
        nodes: Nodes) -> None:
    a = await nodes.node("A")
    await nodes.serve(echo_agent("local"), a.url)
    local_id = view(a, "local")["agent_id"]
    sent = asyncio.Event()

    async def evil(ws: ServerConnection) -> None:
        hello = json.loads(await ws.recv())
        assert (hello["role"], hello["node"]) == ("peer", "A")
        # A node that knows the peer secret (a compromised peer): the handshake holds, and
        # still nothing it sends moves A's own agents.
        await ws.send(json.dumps({"v": 1, **challenge(hello, "EVIL")}))
        assert json.loads(await ws.recv())["type"] == "proof"
        await ws.send(json.dumps({"v": 1, "type": "welcome", "role": "peer", "node": "EVIL"}))
        for frame in [
            "{bad json",
            {"v": 1, "type": "submit", "id": 1, "capability": "x.y"},
            {"v": 1, "type": "agents", "rows": [{"agent_id": "ag-x", "name": "nocaps"}]},
            {"v": 1, "type": "agents", "rows": [row("ag-s", "badschema", capabilities=[
                {"name": "text.echo", "params": {"type": "no-such-type"}}])]},
            {"v": 1, "type": "agents", "rows": [row("ag-y", "local")]},  # A's own name
            {"v": 1, "type": "agents", "rows": [row(local_id, "local", connected=True)]},
            {"v": 1, "type": "agents", "rows": [row("ag-n", "x" * 300)]},
            {"v": 1, "type": "error", "error": {"code": "x", "message": "\x1b[31mhi"}},
            {"v": 1, "type": "result", "task_id": "never-sent", "attempt": 1, "result": 1},
            {"v": 1, "type": "agents", "rows": [row("ag-ok", "evil-ok")], "synced": True},
        ]:
            await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
        sent.set()
        await ws.wait_closed()

    async with websockets.serve(evil, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        await a.peers.add("EVIL", f"ws://127.0.0.1:{port}")
        await a.peers.synced("EVIL")
        await asyncio.wait_for(sent.wait(), 5)
        [peer] = a.peers.view()
        assert peer["bad_frames"] >= 7 and peer["agents"] == 1
        assert {v["name"]: v["node"] for v in a.agents()} == {"local": "A", "evil-ok": "EVIL"}
        assert view(a, "local")["kind"] == "websocket" and view(a, "local")["state"] == "online"
        client = await nodes.client(a.url)
        await a.peers.remove("EVIL")
    await until(lambda: not view(a, "evil-ok")["connected"])
    for i in range(3):
        assert (await client.call("text.echo", {"text": str(i)}, timeout=5))["by"] == "local"


async def test_a_peer_that_never_answers_hello_is_retried_and_removed_at_once(
        nodes: Nodes) -> None:
    a = await nodes.node("A", hello_timeout=0.1)
    hellos = 0

    async def mute(ws: ServerConnection) -> None:
        nonlocal hellos
        await ws.recv()
        hellos += 1
        await ws.wait_closed()

    async with websockets.serve(mute, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        await a.peers.add("MUTE", f"ws://127.0.0.1:{port}")
        await until(lambda: hellos >= 2)  # timed out once, dialled again
        assert "TimeoutError" in (a.peers.view()[0]["error"] or "")
        await asyncio.wait_for(a.peers.remove("MUTE"), 2)
    assert a.peers.view() == [] and a.agents() == []
