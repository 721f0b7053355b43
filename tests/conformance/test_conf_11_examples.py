"""docs/protocol.md §11, the example sessions: every frame shown is a valid frame of its type,
every frame shown from the coordinator holds only fields §5 lists, and the replies the page
shows for a v2 ``status`` and a caller's ``heartbeat`` are what the coordinator sends."""

from __future__ import annotations

import json
from typing import Any

from docpage import check, documented_frames, example_frames
from rawpeer import agent, answer, caller, submit

from reach import Reach
from reach.errors import ProtocolError
from reach.wire import protocol as p


def test_every_example_frame_is_valid_and_documented() -> None:
    frames = example_frames()
    assert len(frames) > 40
    documented = documented_frames()
    for direction, frame in frames:
        if frame["v"] != 1:  # the page's own example of a wrong version
            continue
        if direction == "←":
            check(frame, documented)
        try:
            p.parse(json.dumps(frame))
        except ProtocolError as exc:
            raise AssertionError(f"{frame} is not a valid frame: {exc}") from None


async def test_the_shown_protocol_error_replies_are_the_real_ones(reach: Reach) -> None:
    shown = {frame["error"]["message"].split(";")[0]: frame for d, frame in example_frames()
             if d == "←" and frame["type"] == "error" and
             frame["error"]["code"] == "protocol_error"}
    boss = await caller(reach.url)
    await boss.send({"v": 2, "type": "status", "id": 10, "task_id": "dcba5c3d"})
    real = await boss.recv()
    assert real == shown["unsupported protocol version 2"]
    await boss.send({"v": 1, "type": "heartbeat"})
    real = await boss.recv()
    assert real == shown["frame type 'heartbeat' is not accepted from a caller"]


async def test_the_shown_wrong_attempt_and_late_answer_replies_are_the_real_ones() -> None:
    """The agent session's two examples of answers nothing waits for, with the shortened ids
    the page uses put in place of the real ones."""
    shown = [frame for d, frame in example_frames() if d == "←" and frame["type"] == "error"]
    wrong = next(f for f in shown if f["error"]["details"].get("expected") == 1)
    late = next(f for f in shown if "late" in f["error"]["details"])
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "example", [{"name": "ex.slow", "latency_ms": 20}])
        boss = await caller(reach.url)
        await boss.send(submit(1, "ex.slow"))
        invoke = await worker.expect("invoke")
        await worker.send({"v": 1, "type": "result", "task_id": invoke["task_id"],
                           "attempt": 2, "result": 1})
        real = await worker.expect("error")
        assert _shortened(real, invoke["task_id"], "c0ffee01") == wrong
        await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
        await boss.outcome(1)  # timed out
        await answer(worker, invoke, "late")
        real = await worker.expect("error")
        assert _shortened(real, invoke["task_id"], "5ca1ab1e") == late


def _shortened(frame: dict[str, Any], task_id: str, short: str) -> dict[str, Any]:
    return dict(json.loads(json.dumps(frame).replace(task_id, short)))
