"""docs/protocol.md §5, the frame reference, read from the page: every frame the coordinator
sends in a session that touches every kind (welcome, invoke, accepted, chunk, result, error,
task) holds only fields the page's table for it lists, the task view only the fields its
list names, and every required field of a frame the page lists is there."""

from __future__ import annotations

from typing import Any

from docpage import check, documented_frames, documented_view, section
from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach


async def test_every_frame_sent_is_documented_in_section_5(reach: Reach) -> None:
    frames = documented_frames()
    assert {"register", "welcome", "invoke", "accepted", "error", "task"} <= set(frames)
    assert frames["welcome"][0] >= {"role", "agent_id", "heartbeat_interval"}
    assert frames["invoke"][1] >= {"task_id", "attempt", "capability", "idempotency_key"}
    seen: list[dict[str, Any]] = []

    async def recv(peer: Peer, kind: str | None = None, **match: Any) -> dict[str, Any]:
        frame = await (peer.expect(kind, **match) if kind else peer.recv())
        seen.append(frame)
        return frame

    worker = await agent(reach.url, "documented", [
        {"name": "doc.read", "idempotent": True, "latency_ms": 50},
        {"name": "doc.stream", "streaming": True}], instance="i-doc")
    seen.append(worker.welcome)
    boss = await caller(reach.url, "reader")
    seen.append(boss.welcome)
    await boss.send(submit(1, "doc.read", {"a": 1}, timeout=5, idempotency_key="k"))
    invoke = await recv(worker, "invoke")
    await answer(worker, invoke, {"ok": True})
    await boss.send(submit(2, "doc.stream", {}))
    stream = await recv(worker, "invoke")
    await worker.send({"v": 1, "type": "chunk", "task_id": stream["task_id"], "attempt": 1,
                       "seq": 0, "data": "x"})
    await answer(worker, stream, ["x"])
    await boss.send(submit(3, "doc.read", {}))
    bad = await recv(worker, "invoke")
    await worker.send({"v": 1, "type": "result", "task_id": bad["task_id"], "attempt": 9})
    await recv(worker, "error")  # the wrong attempt's protocol_error
    await worker.send({"v": 1, "type": "error", "task_id": bad["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "no",
                                 "details": {"answer": True}}})
    for req_id in (1, 2, 3):
        while True:
            frame = await recv(boss)
            if frame.get("id") == req_id and frame["type"] in ("result", "error"):
                break
    await boss.send(submit(4, "doc.read", {}, idempotency_key="k", defer_ack=True))
    await boss.send({"v": 1, "type": "status", "id": 5, "task_id": invoke["task_id"]})
    await boss.send({"v": 1, "type": "heartbeat"})
    await boss.send(submit(6, "doc.nothing", {}))
    while len([f for f in seen if f.get("id") in (4, 5, 6)]) < 4:
        await recv(boss)
    kinds = {f["type"] for f in seen}
    assert {"welcome", "invoke", "accepted", "chunk", "result", "error", "task"} <= kinds
    for frame in seen:
        check(frame, frames)
    view_fields, attempt_fields, history_fields = documented_view()
    view = next(f for f in seen if f["type"] == "task")["task"]
    assert set(view) <= view_fields, set(view) - view_fields
    for attempt in view["attempts"]:
        assert set(attempt) == attempt_fields, set(attempt) ^ attempt_fields
        assert attempt["instance"] == "i-doc"
    for entry in view["history"]:
        assert set(entry) == history_fields


async def test_params_that_are_not_an_object_are_invalid_params(reach: Reach) -> None:
    """§5 submit, `params`: anything but an object is `invalid_params` (issue 14: it was a
    `protocol_error`, which blames the SDK rather than the call), echoing the request id; the
    session goes on."""
    assert "anything but an object (a string, an array) is `invalid_params`" in \
        section("### `submit`", "### `accepted`")
    boss = await caller(reach.url, "planner")
    for req_id, params, kind in ((1, "region=east", "a string"), (2, ["east"], "an array"),
                                 (3, 7, "a number"), (4, None, "null"), (6, True, "a boolean")):
        await boss.send({**submit(req_id, "sales.query"), "params": params})
        error = await boss.expect("error")
        assert error["id"] == req_id and error["error"]["code"] == "invalid_params"
        assert error["error"]["details"] == {"type": "submit", "field": "params"}
        assert error["error"]["message"] == f"params must be a JSON object of name: value, not {kind}"
    await boss.send({"v": 1, "type": "status", "id": 5, "task_id": "nope"})
    assert (await boss.expect("error"))["id"] == 5  # still served
