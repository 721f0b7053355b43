"""Coordinators as one Reach: a caller on one node reaches agents on another over a peer link.

Two and three real coordinators in one process, each with its own in-memory store, linked
by ``reach.peers.add``; real agents and clients over loopback websockets."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
import websockets
from peering import BEAT, OPTIONS, Nodes, echo_agent, link, until, view

from reach import Agent, Reach, ReachError


async def test_a_caller_on_a_reaches_an_agent_on_b(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    seen_a, seen_b = view(a, "echo-b"), view(b, "echo-b")
    assert (seen_a["node"], seen_a["kind"], seen_a["state"]) == ("B", "peer", "online")
    assert (seen_b["node"], seen_b["kind"]) == ("B", "websocket")
    assert seen_a["agent_id"] == seen_b["agent_id"]
    assert a.describe()["node"] == "A"
    client = await nodes.client(a.url)
    handle = await client.submit("text.echo", {"text": "hi"})
    assert await handle.result(timeout=5) == {"text": "hi", "by": "echo-b"}
    task = await a.task(handle.task_id)
    assert task is not None and task["state"] == "succeeded"
    [attempt] = task["attempts"]
    assert (attempt["agent"], attempt["agent_id"]) == ("echo-b", seen_b["agent_id"])
    notes = [e.get("note", "") for e in a.trace(handle.trace_id)]
    assert "attempt 1 to echo-b at node B" in notes, notes
    # The task is A's: B keeps no record of it.
    assert await b.task(handle.task_id) is None
    # B's slot bookkeeping saw the forwarded attempt come and go.
    assert view(b, "echo-b")["inflight"] == 0 and view(a, "echo-b")["calls"] == 1


async def test_load_spreads_over_agents_on_both_nodes(nodes: Nodes) -> None:
    a, b = await nodes.node("A", strategy="round_robin"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-a"), a.url)
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    client = await nodes.client(a.url)
    answers = await asyncio.gather(*(client.call("text.echo", {"text": str(i)}, timeout=5)
                                     for i in range(40)))
    by = Counter(answer["by"] for answer in answers)
    assert by["echo-a"] >= 10 and by["echo-b"] >= 10, by
    assert {v["name"]: v["node"] for v in a.agents()} == {"echo-a": "A", "echo-b": "B"}
    assert {v["name"]: v["node"] for v in b.agents()} == {"echo-a": "A", "echo-b": "B"}


async def test_an_agent_leaving_b_stops_being_routed_at_a(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    gone = await nodes.serve(echo_agent("echo-b"), b.url)
    await nodes.serve(echo_agent("echo-a"), a.url)
    await link(a, b)
    await gone.close()
    await until(lambda: view(a, "echo-b")["connected"] is False)
    assert view(a, "echo-b")["state"] != "online"
    client = await nodes.client(a.url)
    for i in range(10):
        assert (await client.call("text.echo", {"text": str(i)}, timeout=5))["by"] == "echo-a"
    await until(lambda: view(a, "echo-b")["state"] == "offline")


async def test_three_nodes_each_speak_only_for_their_own_agents(nodes: Nodes) -> None:
    a, b, c = await nodes.node("A"), await nodes.node("B"), await nodes.node("C")
    await nodes.serve(echo_agent("echo-c"), c.url)
    await link(a, b, c)
    assert view(a, "echo-c")["node"] == "C" and view(b, "echo-c")["node"] == "C"
    # B mirrors C's agent but never re-announces it: A hears of it from C alone.
    mirrored = {p["node"]: p["agents"] for p in a.peers.view()}
    assert mirrored == {"B": 0, "C": 1}
    for node in (a, b):
        client = await nodes.client(node.url)
        assert (await client.call("text.echo", {"text": "x"}, timeout=5))["by"] == "echo-c"


async def test_static_peers_from_settings(nodes: Nodes) -> None:
    b = await nodes.node("B")
    await nodes.serve(echo_agent("echo-b"), b.url)
    a = await nodes.node("A", peers=[b.url])
    await until(lambda: bool(a.agents(names={"echo-b"})))
    [peer] = a.peers.view()
    assert (peer["node"], peer["url"]) == ("B", b.url)
    # Discovery naming the same node later keeps the one link, keyed by its id.
    await a.peers.add("B", b.url)
    assert [(p["node"], p["links"]) for p in a.peers.view()] == [("B", 1)]
    await a.peers.remove("B")
    assert a.peers.view() == []
    # A static list shared by every node names the node itself too: it is skipped.
    c = await nodes.node("C", peers=[b.url])
    await c.peers.add(None, c.url)
    await until(lambda: any(p["error"] == "this node itself" for p in c.peers.view()))
    await until(lambda: bool(c.agents(names={"echo-b"})))  # B's agents mirrored (handshake)
    client = await nodes.client(c.url)
    assert (await client.call("text.echo", {"text": "s"}, timeout=5))["by"] == "echo-b"


async def test_remove_disconnects_the_peers_agents_and_add_brings_them_back(
        nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    await a.peers.remove("B")
    assert view(a, "echo-b")["connected"] is False
    assert view(a, "echo-b")["state"] == "suspected"
    await a.peers.add("B", b.url)
    await a.peers.synced("B")
    assert view(a, "echo-b")["state"] == "online"
    with pytest.raises(ValueError, match="own id"):
        await a.peers.add("A", a.url)


async def test_an_agent_moving_from_b_to_a_is_held_by_a(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    first = await nodes.serve(echo_agent("mover"), b.url)
    await link(a, b)
    agent_id = view(a, "mover")["agent_id"]
    await first.close()
    await until(lambda: not view(a, "mover")["connected"])
    await nodes.serve(echo_agent("mover"), a.url)
    assert view(a, "mover")["node"] == "A" and view(a, "mover")["agent_id"] == agent_id
    # B's word about its (now disconnected) record does not move A's own agent.
    await asyncio.sleep(4 * BEAT)
    assert (view(a, "mover")["node"], view(a, "mover")["state"]) == ("A", "online")
    client = await nodes.client(b.url)
    assert (await client.call("text.echo", {"text": "m"}, timeout=5))["by"] == "mover"
    assert view(b, "mover")["node"] == "A"


async def test_a_wrong_token_peer_is_refused(nodes: Nodes) -> None:
    b = await nodes.node("B")
    await nodes.serve(echo_agent("echo-b"), b.url)
    a = await nodes.node("A", peer_token="not-the-token")
    await a.peers.add("B", b.url)
    # A checks B's proof of the secret first (B proves, then A): B's proof does not hold.
    await until(lambda: "did not prove" in (a.peers.view()[0]["error"] or ""))
    assert "peer token" in a.peers.view()[0]["error"]
    assert a.agents() == []


async def test_beats_keep_a_remote_agent_online_and_silence_suspects_it(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    await asyncio.sleep(6 * BEAT)  # past suspect_after beats: only the forwarded beats keep it
    assert view(a, "echo-b")["state"] == "online"
    assert view(a, "echo-b")["since_heartbeat_s"] < 3 * BEAT
    b.drain("echo-b")
    await until(lambda: view(a, "echo-b")["draining"])
    assert view(a, "echo-b")["state"] == "drained"
    b.undrain("echo-b")
    await until(lambda: view(a, "echo-b")["state"] == "online")
    # An operator's drain at A of B's agent holds while B's rows keep coming.
    a.drain("echo-b")
    await asyncio.sleep(4 * BEAT)
    assert view(a, "echo-b")["draining"] and view(b, "echo-b")["state"] == "online"


async def test_remote_rows_are_bounded_per_peer(nodes: Nodes) -> None:
    a, b = await nodes.node("A", max_peer_agents=2), await nodes.node("B")
    for i in range(3):
        await nodes.serve(echo_agent(f"echo-{i}"), b.url)
    await link(a, b)
    assert len(a.agents()) == 2 and len(b.agents()) == 3
    assert a.peers.view()[0]["bad_frames"] >= 1


async def test_no_agent_anywhere_is_unavailable_not_a_hang(nodes: Nodes) -> None:
    a, b = await nodes.node("A", **{**OPTIONS, "queue_wait": 0.01}), await nodes.node("B")
    gone: Agent = await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    await gone.close()
    await until(lambda: view(a, "echo-b")["state"] != "online")
    client = await nodes.client(a.url)
    with pytest.raises(ReachError) as err:
        await client.call("text.echo", {"text": "x"}, timeout=1)
    assert err.value.code in ("unavailable", "timeout")


def test_reach_exposes_its_peers() -> None:
    reach = Reach()
    assert reach.peers.view() == [] and reach.node.node_id.startswith("n-")


async def test_the_admin_feed_labels_each_agent_with_its_node(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-a"), a.url)
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    async with websockets.connect(a.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": a.admin_token}))
        snapshot = json.loads(await asyncio.wait_for(ws.recv(), 5))
    assert snapshot["type"] == "snapshot" and snapshot["coordinator"]["node"] == "A"
    assert {r["name"]: r["node"] for r in snapshot["agents"]} == {"echo-a": "A",
                                                                  "echo-b": "B"}
