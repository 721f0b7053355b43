"""docs/protocol.md §1, transport and encoding: one JSON object per message (text, or binary
UTF-8), ``v`` may be left out and is always sent, absent fields are null, unknown fields are
ignored, numbers may be integers, and a message over ``max_frame_bytes`` closes with 1009."""

from __future__ import annotations

import json

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach


async def test_binary_frames_missing_v_and_unknown_fields_are_accepted(reach: Reach) -> None:
    peer = await Peer.open(reach.url)
    # binary UTF-8 JSON, no `v`, an unknown field: all accepted (§1)
    await peer.send(json.dumps({"type": "hello", "caller": "bin", "future_field": 1}).encode())
    welcome = await peer.recv()
    assert welcome["type"] == "welcome" and welcome["v"] == 1
    await peer.send({"type": "status", "id": 1, "task_id": "f" * 32, "also_unknown": [1]})
    reply = await peer.recv()
    assert reply["type"] == "error" and reply["id"] == 1
    assert "task_id" not in reply and "trace_id" not in reply  # absent means null


async def test_integer_numbers_are_numbers(reach: Reach) -> None:
    """§1: a number may be written ``10`` or ``10.0``; both are read as numbers."""
    worker = await agent(reach.url, "ints", [{"name": "conf.int", "latency_ms": 100,
                                             "weight": 50}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.int", timeout=5))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "heartbeat", "inflight": 1, "queue_depth": 0,
                       "load": 1})
    await answer(worker, invoke, 3)
    assert (await boss.outcome(1))["result"] == 3
    await boss.send({"v": 1, "type": "status", "id": 2, "task_id": invoke["task_id"]})
    view = (await boss.expect("task", id=2))["task"]
    assert view["timeout"] == 5  # as sent: 5 or 5.0, the same number


async def test_a_message_over_max_frame_bytes_closes_with_1009() -> None:
    async with Reach.start(max_frame_bytes=4096) as reach:
        boss = await caller(reach.url)
        assert boss.welcome["max_frame_bytes"] == 4096
        await boss.send(submit(1, "conf.any", {"pad": "x" * 5000}))
        code, _ = await boss.closed()
        assert code == 1009
        # only that connection: a new one works
        again = await caller(reach.url)
        await again.send({"v": 1, "type": "status", "id": 1, "task_id": "0" * 32})
        assert (await again.recv())["error"]["code"] == "invalid_params"
