"""docs/protocol.md §8 (Fallbacks), §5 (``submit.fallback``, ``result.fallback``, the task
view's ``fallback``) and §7 (``fallback`` in the capability spec), over raw websockets."""

from __future__ import annotations

from typing import Any

from rawpeer import agent, answer, caller, submit

from reach import Reach


async def _fault(worker: Any, invoke: dict[str, Any]) -> None:
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"],
                       "attempt": invoke["attempt"],
                       "error": {"code": "task_failed", "message": "disk full"}})


async def test_a_callers_value_answers_a_fault_and_the_result_says_so(reach: Reach) -> None:
    worker = await agent(reach.url, "broken", [{"name": "conf.fb"}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.fb", fallback={"value": {"default": True}}))
    await _fault(worker, await worker.expect("invoke"))
    result = await boss.outcome(1)
    assert result["type"] == "result" and result["result"] == {"default": True}
    assert result["fallback"] == {"kind": "value", "reason": "fault"}
    await boss.send({"v": 1, "type": "status", "id": 2, "task_id": result["task_id"]})
    view = (await boss.expect("task", id=2))["task"]
    assert view["state"] == "succeeded" and view["fallback"] == result["fallback"]
    assert view["history"][-1]["note"] == "fallback: value (fault)"
    assert [a["outcome"] for a in view["attempts"]] == ["fault"]


async def test_a_declared_last_good_answers_with_its_age(reach: Reach) -> None:
    worker = await agent(reach.url, "cacher", [{"name": "conf.lg", "fallback": {
        "last_good": {"max_age_s": 60}}}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.lg", {"k": 1}))
    await answer(worker, await worker.expect("invoke"), "fresh")
    first = await boss.outcome(1)
    assert first["result"] == "fresh" and "fallback" not in first  # absent: not a fallback
    await boss.send(submit(2, "conf.lg", {"k": 1}))
    await _fault(worker, await worker.expect("invoke"))
    second = await boss.outcome(2)
    assert second["result"] == "fresh" and second["fallback"]["kind"] == "last_good"
    assert second["fallback"]["reason"] == "fault" and 0 <= second["fallback"]["age_s"] < 60


async def test_no_agent_online_is_answered_at_once_with_the_fallback(reach: Reach) -> None:
    worker = await agent(reach.url, "gone", [{"name": "conf.gone"}])
    await worker.close()  # closed without deregistering: suspected, still declared
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.gone", fallback={"value": 0}))
    result = await boss.outcome(1)
    assert result["result"] == 0
    assert result["fallback"] == {"kind": "value", "reason": "unavailable"}
    # without one, a call is refused, as before (a submit would wait for an agent)
    await boss.send(submit(2, "conf.gone", defer_ack=True))
    assert (await boss.outcome(2))["error"]["code"] == "unavailable"


async def test_an_answer_is_never_replaced(reach: Reach) -> None:
    worker = await agent(reach.url, "answerer", [{"name": "conf.ans",
                                                  "fallback": {"value": "fallback"}}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.ans"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "no such customer",
                                 "details": {"answer": True}}})
    error = (await boss.outcome(1))["error"]
    assert error["message"] == "no such customer" and error["details"]["answer"] is True


async def test_a_fallback_that_is_not_exactly_one_kind_is_a_protocol_error(reach: Reach
                                                                          ) -> None:
    await agent(reach.url, "any", [{"name": "conf.any"}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.any", fallback={"value": 1, "capability": "x.y"}))
    error = await boss.expect("error", id=1)
    assert error["error"]["code"] == "protocol_error"
    assert "exactly one of" in error["error"]["message"]
