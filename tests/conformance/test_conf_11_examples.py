"""docs/protocol.md §11, the example sessions: every frame shown is a valid frame of its type,
every frame shown from the coordinator holds only fields §5 lists, and the replies the page
shows for a v2 ``status`` and a caller's ``heartbeat`` are what the coordinator sends."""

from __future__ import annotations

import json

from docpage import check, documented_frames, example_frames
from rawpeer import caller

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
