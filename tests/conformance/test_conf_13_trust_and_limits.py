"""docs/protocol.md §13, trust and limits: keys reach agents scoped as ``<caller>/<key>``,
another caller's task reads as an unknown one, a stranger's trace is ``unauthorized``, and
fields out of their bounds are protocol_errors naming the field."""

from __future__ import annotations

from rawpeer import agent, answer, caller, submit

from reach import Reach

CAP = [{"name": "conf.own", "latency_ms": 100}]


async def test_ownership(reach: Reach) -> None:
    worker = await agent(reach.url, "owner-agent", CAP)
    alice, bob = await caller(reach.url, "alice"), await caller(reach.url, "bob")
    await alice.send(submit(1, "conf.own", idempotency_key="a/b c"))
    invoke = await worker.expect("invoke")
    assert invoke["idempotency_key"] == "alice/a/b c"
    await answer(worker, invoke, "alice's")
    done = await alice.outcome(1)
    await bob.send({"v": 1, "type": "status", "id": 1, "task_id": done["task_id"]})
    error = (await bob.recv())["error"]
    assert error["code"] == "invalid_params"
    assert error["message"] == f"no task with id {done['task_id']!r} for caller 'bob'"
    await bob.send({"v": 1, "type": "result", "id": 2, "task_id": done["task_id"]})
    assert (await bob.recv())["error"]["code"] == "invalid_params"
    await alice.send({"v": 1, "type": "status", "id": 3, "task_id": done["task_id"]})
    trace_id = (await alice.expect("task", id=3))["task"]["trace_id"]
    await bob.send(submit(4, "conf.own", trace_id=trace_id))
    error = (await bob.outcome(4))["error"]
    assert error["code"] == "unauthorized" and error["details"]["trace_id"] == trace_id


async def test_bounds_on_fields(reach: Reach) -> None:
    boss = await caller(reach.url)
    for req_id, field, frame in [
            (1, "priority", {"priority": 10}),
            (2, "timeout", {"timeout": 0}),
            (3, "max_retries", {"max_retries": 101}),
            (4, "idempotency_key", {"idempotency_key": "k" * 401}),
            (5, "capability", {"capability": "bad\u202ename"})]:
        await boss.send({**submit(req_id, "conf.own"), **frame})
        reply = await boss.recv()
        assert reply["id"] == req_id and reply["error"]["code"] == "protocol_error"
        assert reply["error"]["details"] == {"type": "submit", "field": field}
    await boss.send('{"v": 1, "type": "submit", "id": 6, "capability": "c", "timeout": NaN}')
    reply = await boss.recv()
    assert reply["id"] == 6 and reply["error"]["code"] == "protocol_error"
    worker = await agent(reach.url, "bounded", CAP)
    await worker.send({"v": 1, "type": "ack", "task_id": "t", "attempt": 1_000_001})
    reply = await worker.recv()
    assert reply["error"]["details"] == {"type": "ack", "field": "attempt"}
    await worker.send({"v": 1, "type": "heartbeat", "load": 1001})
    assert (await worker.recv())["error"]["details"] == {"type": "heartbeat", "field": "load"}
