"""``reach.peers``: what a node does with the answers a dialled peer can give, and how ``add``
keys its links. The far side is a scripted websocket server on loopback that answers the
peer hello as told (a caller's welcome, another node's id, this node's own id, a refusal), so
each answer is met without a second coordinator to misconfigure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import websockets
from peering import Nodes, challenge, until

from reach import Reach
from reach.cluster import handshake

Answer = Callable[[dict[str, Any]], dict[str, Any] | None]


class Far:
    """A websocket server that answers each peer hello with ``answer(hello)`` (None: keeps
    the connection open without a word) and counts the hellos."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.hellos: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, ws: Any) -> None:
        hello = json.loads(await ws.recv())
        self.hellos.append(hello)
        frame = self.answer(hello)
        if frame is None:
            await ws.wait_closed()
            return
        await ws.send(json.dumps({"v": 1, **frame}))
        await ws.close()


@pytest.fixture
async def far() -> AsyncIterator[Callable[[Answer], Any]]:
    servers: list[Any] = []

    async def start(answer: Answer) -> Far:
        fake = Far(answer)
        server = await websockets.serve(fake.handle, "127.0.0.1", 0)
        servers.append(server)
        fake.url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return fake

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def welcome(role: str, node: str | None) -> Answer:
    return lambda hello: {"type": "welcome", "role": role, "node": node}


def proving(node: str) -> Answer:
    """A holder that knows the peer secret and says it is ``node``."""
    return lambda hello: challenge(hello, node)


def only(reach: Reach) -> dict[str, Any]:
    (peer,) = reach.peers.view()
    return peer


async def test_a_caller_welcome_is_not_a_peer_and_is_dialled_again(
        nodes: Nodes, far: Callable[[Answer], Any]) -> None:
    a = await nodes.node("A")
    fake = await far(welcome("caller", None))
    await a.peers.add("B", fake.url)
    await until(lambda: len(fake.hellos) >= 2)  # refused, then tried again (backoff)
    peer = only(a)
    assert "answered the peer hello without proving it knows the peer secret" in peer["error"]
    assert not peer["connected"] and peer["links"] == 0
    hello = fake.hellos[0]
    # The secret is never sent: the hello carries a fresh nonce instead (§14, the handshake).
    assert (hello["type"], hello["role"], hello["node"]) == ("hello", "peer", "A")
    assert "token" not in hello and len(hello["nonce"]) == 32
    assert hello["nonce"] != fake.hellos[1]["nonce"]


async def test_a_url_that_answers_as_another_node_is_not_linked(
        nodes: Nodes, far: Callable[[Answer], Any]) -> None:
    a = await nodes.node("A")
    fake = await far(proving("C"))
    await a.peers.add("B", fake.url)
    await until(lambda: only(a)["error"] is not None)
    assert only(a)["error"] == f"{fake.url} is node 'C', not 'B'"
    assert only(a)["links"] == 0


async def test_a_static_peer_that_is_this_node_is_not_dialled_again(
        nodes: Nodes, far: Callable[[Answer], Any]) -> None:
    a = await nodes.node("A")
    itself = await far(proving("A"))  # the static list names every node, this one too
    refused = await far(lambda hello: {"type": "error", "error": {
        "code": "protocol_error", "message": "a peer hello must name its own node",
        "details": {"same_node": True, "proof": handshake.mac(
            "cluster-token", "same-node", "A", "A", hello["nonce"], "")}}})
    await a.peers.add(None, itself.url)
    await a.peers.add(None, refused.url)
    await until(lambda: all(p["error"] == "this node itself" for p in a.peers.view()))
    await asyncio.sleep(0.3)  # a retry would have come within 0.1 s (the backoff's start)
    assert len(itself.hellos) == 1 and len(refused.hellos) == 1


async def test_a_refusal_says_why_and_is_retried(nodes: Nodes,
                                                  far: Callable[[Answer], Any]) -> None:
    a = await nodes.node("A")
    fake = await far(lambda hello: {"type": "error", "error": {
        "code": "unauthorized", "message": "bad peer token"}})
    await a.peers.add("B", fake.url)
    await until(lambda: len(fake.hellos) >= 2)
    assert only(a)["error"] == "refused: bad peer token"


async def test_add_refuses_this_nodes_own_id_and_any_link_once_closing(nodes: Nodes) -> None:
    a = await nodes.node("A")
    with pytest.raises(ValueError, match="this node's own id"):
        await a.peers.add("A", "ws://127.0.0.1:9")
    await a.peers.close()
    with pytest.raises(RuntimeError, match="no new peer links"):
        await a.peers.add("B", "ws://127.0.0.1:9")


async def test_add_keeps_one_link_per_node_and_redials_a_moved_one(
        nodes: Nodes, far: Callable[[Answer], Any]) -> None:
    a = await nodes.node("A")
    first, second = await far(lambda h: None), await far(lambda h: None)
    await a.peers.add("B", first.url)
    await until(lambda: len(first.hellos) == 1)
    await a.peers.add("B", first.url)  # the same: nothing new
    assert [p["url"] for p in a.peers.view()] == [first.url]
    await a.peers.add("B", second.url)  # B moved: the old link goes, the new one is dialled
    await until(lambda: len(second.hellos) == 1)
    assert [(p["node"], p["url"]) for p in a.peers.view()] == [("B", second.url)]
    # A static peer (its URL only), then discovery naming its node: one link, re-keyed.
    static = await far(lambda h: None)
    await a.peers.add(None, static.url)
    await until(lambda: len(static.hellos) == 1)
    await a.peers.add("C", static.url)
    assert sorted((p["node"], p["url"]) for p in a.peers.view()) == [
        ("B", second.url), ("C", static.url)]
    await a.peers.remove("C")
    await a.peers.remove("nobody")  # not linked: nothing to do
    assert [p["node"] for p in a.peers.view()] == ["B"]
    assert len(static.hellos) == 1  # re-keying did not dial it a second time
