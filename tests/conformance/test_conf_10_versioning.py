"""docs/protocol.md §10, versioning: another ``v`` is a protocol_error listing the supported
versions (refused with 1008 as a first frame, answered on its ``id`` later), an unknown
``type`` is a protocol_error naming it, unknown fields are ignored."""

from __future__ import annotations

from rawpeer import Peer, caller

from reach import Reach


async def test_another_version_as_the_first_frame_is_refused(reach: Reach) -> None:
    peer = await Peer.open(reach.url)
    await peer.send({"v": 2, "type": "hello", "caller": "future"})
    error = (await peer.recv())["error"]
    assert error["code"] == "protocol_error"
    assert error["message"] == "unsupported protocol version 2; this coordinator speaks v1"
    assert error["details"]["supported"] == [1]
    assert (await peer.closed())[0] == 1008


async def test_another_version_later_is_answered_on_its_id(reach: Reach) -> None:
    boss = await caller(reach.url)
    await boss.send({"v": 2, "type": "status", "id": 10, "task_id": "dcba5c3d"})
    reply = await boss.recv()
    assert reply["id"] == 10 and reply["error"]["details"] == {"supported": [1],
                                                               "type": "status"}
    await boss.send({"v": 1, "type": "teleport", "id": 11})
    reply = await boss.recv()
    assert reply["id"] == 11 and reply["error"]["details"] == {"type": "teleport"}
    assert "expected one of" in reply["error"]["message"]
    await boss.send({"v": 1, "type": "status", "id": 12, "task_id": "0" * 32,
                     "added_in_a_later_minor": {"x": 1}})
    assert (await boss.recv())["error"]["code"] == "invalid_params"  # read, not refused
