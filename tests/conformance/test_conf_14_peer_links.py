"""docs/protocol.md §14 "Peer links": a node checked from the page with raw websockets, as
another coordinator written in any language would link to it: the peer hello and its
refusals, the ``agents`` snapshot and changes, ``forward`` relayed to the agent and its
answers relayed back, ``cancel``, and hostile frames answered with typed errors while the
node carries on."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from typing import Any

import pytest
from docpage import section
from rawpeer import Peer, agent, answer, caller, submit, wait_state

from reach import Reach

TOKEN = "peer-secret"
CAP = {"name": "conf.peer", "idempotent": True, "latency_ms": 500}


@pytest.fixture
async def node() -> Any:
    async with Reach.start(heartbeat_interval=0.1, node_id="B", peer_token=TOKEN,
                           peer_flush=0.005, http_port=None) as coordinator:
        yield coordinator


NONCE = "a" * 32


def mac(role: str, dialer: str, holder: str, dialer_nonce: str, holder_nonce: str,
        secret: str = TOKEN) -> str:
    """§14's proof, computed from the page: HMAC-SHA256 over the six lines, in hex."""
    text = "\n".join(("reach-peer-v1", role, dialer, holder, dialer_nonce, holder_nonce))
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


async def peer(url: str, secret: str | None = TOKEN, **fields: Any) -> Peer:
    """A peer link, handshake done (with ``secret``: None stops after the hello)."""
    link = await Peer.open(url)
    hello = {"v": 1, "type": "hello", "role": "peer", "node": "A", "nonce": NONCE, **fields}
    await link.send(hello)
    if secret is None:
        return link
    challenge = await link.expect("challenge")
    assert challenge["proof"] == mac("holder", "A", challenge["node"], NONCE,
                                     challenge["nonce"])  # B knows the secret
    await link.send({"v": 1, "type": "proof", "proof": mac(
        "dialer", "A", challenge["node"], NONCE, challenge["nonce"], secret)})
    return link


def forward(agent_id: str, task_id: str = "t-1", attempt: int = 1, **fields: Any
            ) -> dict[str, Any]:
    return {"v": 1, "type": "forward", "agent_id": agent_id, "task_id": task_id,
            "attempt": attempt, "capability": "conf.peer", "params": {"x": 1},
            "idempotency_key": "planner/k1", "trace_id": "tr-1", "caller": "planner",
            **fields}


async def wait_inflight(node: Reach, count: int) -> None:
    async with asyncio.timeout(2):
        while next(a for a in node.agents() if a["name"] == "conf-worker")["inflight"] != count:
            await asyncio.sleep(0.005)


def test_the_page_documents_the_peer_link() -> None:
    text = section("## 14. Peer links between coordinators", "\n## 15.")
    for needed in ('`role: "peer"`', "`forward`", "`agents`", "`synced`", "`beat_age`",
                   '`details.link: "undelivered"`', '`details.link: "lost"`',
                   "`max_peer_agents`", "`reach.peers.add(node_id, url)`",
                   "`details.full: true`", "`challenge`", "`proof`", "HMAC-SHA256",
                   "reach-peer-v1", "`same-node`"):
        assert needed in text, needed


async def test_a_peer_with_a_wrong_proof_is_refused(node: Reach) -> None:
    link = await peer(node.url, secret="wrong")
    refusal = await link.expect("error")
    assert refusal["error"]["code"] == "unauthorized" and "task_id" not in refusal
    assert (await link.closed())[0] == 1008
    assert all(f["type"] != "agents" for f in link.held)


@pytest.mark.parametrize("fields", [{"token": TOKEN}, {"nonce": None}])
async def test_an_old_style_hello_is_refused(node: Reach, fields: dict[str, Any]) -> None:
    link = await peer(node.url, secret=None, **fields)  # the token sent, or no nonce
    refusal = await link.expect("error")
    assert refusal["error"]["code"] == "protocol_error"
    assert refusal["error"]["details"]["handshake"] == "challenge-response"
    assert (await link.closed())[0] == 1008


async def test_a_peer_naming_this_node_is_refused(node: Reach) -> None:
    link = await peer(node.url, secret=None, node="B")
    refusal = await link.expect("error")
    assert refusal["error"]["code"] == "protocol_error"
    assert refusal["error"]["details"]["same_node"] is True
    assert refusal["error"]["details"]["proof"] == mac("same-node", "B", "B", NONCE, "")
    assert (await link.closed())[0] == 1008


async def test_welcome_snapshot_forward_and_answers(node: Reach) -> None:
    worker = await agent(node.url, "conf-worker", [CAP])
    agent_id = worker.welcome["agent_id"]
    link = await peer(node.url)
    welcome = await link.expect("welcome")
    assert (welcome["role"], welcome["node"]) == ("peer", "B")
    snapshot = await link.expect("agents", synced=True)
    [row] = snapshot["rows"]
    assert (row["agent_id"], row["name"], row["connected"]) == (agent_id, "conf-worker", True)
    assert [c["name"] for c in row["capabilities"]] == ["conf.peer"]
    await link.send(forward(agent_id))
    invoke = await worker.expect("invoke", task_id="t-1")
    assert (invoke["attempt"], invoke["params"], invoke["caller"]) == (1, {"x": 1}, "planner")
    await worker.send({"v": 1, "type": "ack", "task_id": "t-1", "attempt": 1})
    assert (await link.expect("ack", task_id="t-1"))["attempt"] == 1
    await worker.send({"v": 1, "type": "chunk", "task_id": "t-1", "attempt": 1, "seq": 0,
                       "data": "half"})
    assert (await link.expect("chunk", task_id="t-1"))["data"] == "half"
    await answer(worker, invoke, {"done": True})
    assert (await link.expect("result", task_id="t-1"))["result"] == {"done": True}
    # Changes follow: a drain at B reaches the peer as a row.
    node.drain("conf-worker")
    changed = await link.expect("agents")
    while not changed["rows"][0]["draining"]:  # rows sent before the drain (a slow host's)
        changed = await link.expect("agents")
    assert changed["rows"][0]["draining"] is True and "capabilities" not in changed["rows"][0]
    await link.close()
    await worker.close()


async def test_a_forward_to_a_busy_agent_is_refused_as_full(node: Reach) -> None:
    worker = await agent(node.url, "conf-worker", [CAP], max_concurrency=1)
    agent_id = worker.welcome["agent_id"]
    link = await peer(node.url)
    await link.expect("agents", synced=True)
    await link.send(forward(agent_id, "t-1"))
    await worker.expect("invoke", task_id="t-1")  # its one slot
    await link.send(forward(agent_id, "t-2"))
    busy = (await link.expect("error", task_id="t-2"))["error"]
    assert busy["code"] == "unavailable"
    assert (busy["details"]["link"], busy["details"]["full"]) == ("undelivered", True)
    await link.send(forward("ag-nobody", "t-3"))  # not busy, not here: no ``full``
    gone = (await link.expect("error", task_id="t-3"))["error"]
    assert gone["details"]["link"] == "undelivered" and "full" not in gone["details"]
    await link.close()
    await worker.close()


async def test_cancel_frees_the_slot_and_a_lost_agent_is_reported(node: Reach) -> None:
    worker = await agent(node.url, "conf-worker", [CAP])
    agent_id = worker.welcome["agent_id"]
    link = await peer(node.url)
    await link.expect("agents", synced=True)
    await link.send(forward(agent_id, "t-c"))
    await worker.expect("invoke", task_id="t-c")
    assert next(a for a in node.agents() if a["name"] == "conf-worker")["inflight"] == 1
    await link.send({"v": 1, "type": "cancel", "task_id": "t-c", "attempt": 1})
    await wait_inflight(node, 0)
    # The agent's late answer is told it was given up (§3), and is not relayed.
    await worker.send({"v": 1, "type": "result", "task_id": "t-c", "attempt": 1})
    late = await worker.expect("error", task_id="t-c")
    assert (late["error"]["code"], late["error"]["details"]["reason"]) == ("timeout",
                                                                          "cancelled")
    await link.send(forward(agent_id, "t-l"))
    await worker.expect("invoke", task_id="t-l")
    await worker.close()
    lost = await link.expect("error", task_id="t-l")
    assert all(f.get("task_id") != "t-c" for f in link.held)  # nothing of t-c came back
    assert lost["error"]["code"] == "unavailable"
    assert lost["error"]["details"]["link"] == "lost"
    await link.close()


async def test_hostile_frames_get_typed_errors_and_the_node_carries_on(node: Reach) -> None:
    worker = await agent(node.url, "conf-worker", [CAP])
    agent_id = worker.welcome["agent_id"]
    link = await peer(node.url)
    await link.expect("agents", synced=True)
    await link.send("{not json")
    assert (await link.expect("error"))["error"]["code"] == "protocol_error"
    await link.send(submit(5, "conf.peer"))
    wrong = await link.expect("error", id=5)
    assert wrong["error"]["details"]["expected"] == ["forward", "cancel"]
    await link.send({"v": 1, "type": "forward", "task_id": "t-x"})
    assert "invalid 'forward' frame" in (await link.expect("error"))["error"]["message"]
    for bad_agent in ("ag-nobody", "../../etc"):
        await link.send(forward(bad_agent, "t-u"))
        refused = await link.expect("error", task_id="t-u")
        assert refused["error"]["code"] in ("unavailable", "protocol_error")
    await link.send(forward(agent_id, "t-u", capability="conf.other"))
    refused = await link.expect("error", task_id="t-u")
    assert refused["error"]["details"]["link"] == "undelivered"
    await link.send(forward(agent_id, "t-d"))
    await link.send(forward(agent_id, "t-d"))
    assert "already forwarded" in (await link.expect("error"))["error"]["message"]
    node.drain("conf-worker")
    await link.send(forward(agent_id, "t-n"))
    refused = await link.expect("error", task_id="t-n")
    assert (refused["error"]["code"], refused["error"]["details"]["link"]) == (
        "unavailable", "undelivered")
    node.undrain("conf-worker")
    await link.send("x" * (node.settings.max_frame_bytes + 1))
    assert (await link.closed())[0] == 1009
    # The node carries on: its agent still serves a local caller.
    await wait_state(node, "conf-worker", "online")
    client = await caller(node.url)
    await client.send(submit(1, "conf.peer"))
    invoke = await worker.expect("invoke", caller="conformance")
    await answer(worker, invoke, "still here")
    assert (await client.outcome(1))["result"] == "still here"
    await client.close()
    await worker.close()
