"""docs/protocol.md §6, the error object and codes: every error has code, message and details,
and the details the table promises for each code are there (protocol_error: type, supported,
expected, field; invalid_params: reason, capability, task_id; no_route: suggestions;
unavailable: capability; task_failed: answer + agent or remote; timeout: agent)."""

from __future__ import annotations

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach

ECHO = {"name": "err.echo", "latency_ms": 50,
        "params": {"type": "object", "properties": {"n": {"type": "integer"}}}}


def error_of(frame: dict[str, object]) -> dict[str, object]:
    assert frame["type"] == "error", frame
    error = frame["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "details"}, error
    return error


async def test_protocol_error_details(reach: Reach) -> None:
    boss = await caller(reach.url)
    cases = [
        ({"v": 1, "type": "teleport"}, {"type": "teleport"}),
        ({"v": 2, "type": "status", "id": 3, "task_id": "x"}, {"supported": [1],
                                                              "type": "status"}),
        ({"v": 1, "type": "heartbeat"}, {"type": "heartbeat",
                                         "expected": ["submit", "status", "result",
                                                      "cancel"]}),
        ({"v": 1, "type": "submit", "id": 4, "priority": 11},
         {"type": "submit", "field": "priority"}),
    ]
    for frame, details in cases:
        await boss.send(frame)
        error = error_of(await boss.recv())
        assert error["code"] == "protocol_error" and error["details"] == details, error
    worker = await agent(reach.url, "wrong-role", [ECHO])
    await worker.send({"v": 1, "type": "status", "id": 1, "task_id": "x"})
    error = error_of(await worker.recv())
    assert error["details"] == {"type": "status", "expected": [
        "heartbeat", "ack", "chunk", "result", "error", "deregister", "probe_result",
        "register"]}


async def test_invalid_params_details(reach: Reach) -> None:
    await agent(reach.url, "checker", [ECHO])
    boss = await caller(reach.url, "det")
    await boss.send(submit(1, "err.echo", {"n": "one"}))
    error = error_of(await boss.outcome(1))
    assert error["code"] == "invalid_params"
    assert error["details"]["capability"] == "err.echo" and error["details"]["reason"]
    for req_id, frame in [(2, {"type": "status", "id": 2, "task_id": "0" * 32}),
                          (3, {"type": "result", "id": 3, "task_id": "0" * 32})]:
        await boss.send({"v": 1, **frame})
        error = error_of(await boss.outcome(req_id))
        assert error["code"] == "invalid_params"
        assert error["details"] == {"task_id": "0" * 32, "reason": "no such task"}
    await boss.send({"v": 1, "type": "submit", "id": 4, "capability": "", "intent": " "})
    error = error_of(await boss.outcome(4))
    assert error["code"] == "invalid_params" and error["details"]["reason"]
    await boss.send(submit(5, "---"))
    error = error_of(await boss.outcome(5))
    assert error["code"] == "invalid_params"
    assert error["details"]["capability"] == "---" and "no words" in error["details"]["reason"]


async def test_invalid_params_details_on_a_refused_registration(reach: Reach) -> None:
    for caps, name in [([{"name": "ok.one"}, {"name": "bad.schema", "params": {"type": 5}}],
                        "bad.schema"),
                       ([{"name": "///"}], "///")]:
        peer = await Peer.open(reach.url)
        await peer.send({"v": 1, "type": "register", "name": "refused", "capabilities": caps})
        error = error_of(await peer.recv())
        assert error["code"] == "invalid_params"
        assert error["details"]["capability"] == name and error["details"]["reason"]
        assert (await peer.closed())[0] == 1008


async def test_no_route_and_unavailable_details(reach: Reach) -> None:
    worker = await agent(reach.url, "going", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "err.ehco"))
    error = error_of(await boss.outcome(1))
    assert error["code"] == "no_route"
    assert error["details"] == {"capability": "err.ehco", "suggestions": ["err.echo"]}
    await worker.send({"v": 1, "type": "deregister"})
    await worker.close()
    await boss.send(submit(2, "err.echo", defer_ack=True))  # a call (a submit would wait)
    error = error_of(await boss.outcome(2))
    assert error["code"] == "unavailable" and error["details"]["capability"] == "err.echo"


async def test_task_failed_answer_and_fault_forms(reach: Reach) -> None:
    worker = await agent(reach.url, "teller", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "err.echo"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "nope",
                                 "details": {"answer": True}}})
    error = error_of(await boss.outcome(1))
    assert error == {"code": "task_failed", "message": "nope",
                     "details": {"answer": True, "agent": "teller"}}
    await boss.send(submit(2, "err.echo"))  # not idempotent: a fault is final
    invoke = await worker.expect("invoke")
    fault = {"code": "task_failed", "message": "RuntimeError: disk full",
             "details": {"answer": False, "type": "RuntimeError"}}
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": fault})
    error = error_of(await boss.outcome(2))
    assert error["code"] == "task_failed"
    assert error["details"]["remote"] == {**fault, "agent": "teller"}


async def test_timeout_names_the_agent() -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "sleepy", [{**ECHO, "latency_ms": 20}])
        boss = await caller(reach.url)
        await boss.send(submit(1, "err.echo"))
        invoke = await worker.expect("invoke")
        await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"],
                           "attempt": 1})
        error = error_of(await boss.outcome(1))
        assert error["code"] == "timeout" and error["details"]["agent"] == "sleepy"
        await answer(worker, invoke, "late")
        notice = await worker.expect("error")
        assert error_of(notice)["details"] == {"reason": "timeout", "late": "result"}
