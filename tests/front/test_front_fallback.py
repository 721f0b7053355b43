"""The REST front door and fallbacks: a body's ``fallback`` on ``POST /v1/tasks``, and the
label on ``TaskStatus`` and ``CallResult`` (docs/http-api.md, docs/protocol.md §8)."""

from __future__ import annotations

from conftest import Front


async def test_a_submit_body_fallback_answers_a_crash_and_the_status_says_so(front: Front
                                                                           ) -> None:
    status, accepted, _ = await front.post("/v1/tasks", {
        "capability": "boom.run", "fallback": {"value": {"default": 1}}, "timeout": 5})
    assert status == 202
    status, view, _ = await front.get(f"/v1/tasks/{accepted['task_id']}?wait=5")
    assert status == 200 and view["state"] == "succeeded"
    assert view["result"] == {"default": 1}
    assert view["fallback"] == {"kind": "value", "reason": "fault"}


async def test_a_fallback_to_another_capability_over_rest(front: Front) -> None:
    status, accepted, _ = await front.post("/v1/tasks", {
        "capability": "boom.run", "fallback": {"capability": "echo.run"}, "timeout": 5})
    assert status == 202
    _, view, _ = await front.get(f"/v1/tasks/{accepted['task_id']}?wait=5")
    assert view["result"] == {"echo": {}}
    assert view["fallback"]["kind"] == "capability"
    assert view["fallback"]["capability"] == "echo.run"


async def test_a_call_result_without_a_fallback_has_none(front: Front) -> None:
    status, body, _ = await front.post("/v1/call/echo.run", {"a": 1})
    assert status == 200 and body["result"] == {"echo": {"a": 1}}
    assert body.get("fallback") is None


async def test_a_bad_fallback_in_the_body_is_422(front: Front) -> None:
    status, body, _ = await front.post("/v1/tasks", {"capability": "echo.run",
                                                     "fallback": {"nothing": 1}})
    assert status == 422 and "exactly one of" in str(body)
