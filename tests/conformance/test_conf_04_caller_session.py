"""docs/protocol.md §4, the caller session: submit, accepted, outcome on the same id; the
order of the checks before acceptance (the idempotency key first); duplicates and the key's
scope; ``defer_ack`` (one frame for both); ``wait: false`` and the caller's ``result``;
``status``; intent routing; the caller's ``timeout``."""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach

SCHEMA = {"type": "object", "required": ["region"],
          "properties": {"region": {"type": "string"}}}
SALES = {"name": "sales.query", "idempotent": True, "latency_ms": 50, "params": SCHEMA,
         "intents": ["查一下上季度华东区的销售额", "sales figures"]}


async def serve_forever(peer: Peer, result: Any = "done") -> asyncio.Task[None]:
    """Answer every invoke at once with ``result`` (an invoke's params when it is None)."""
    async def run() -> None:
        while True:
            invoke = await peer.expect("invoke", timeout=30)
            await answer(peer, invoke, invoke["params"] if result is None else result)
    return asyncio.get_running_loop().create_task(run())


async def test_submit_accepted_then_result_on_the_same_id(reach: Reach) -> None:
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, None)
    boss = await caller(reach.url, "planner")
    await boss.send(submit(41, "SalesQuery", {"region": "east"}))
    accepted = await boss.recv()
    assert accepted["type"] == "accepted" and accepted["id"] == 41
    assert accepted["duplicate"] is False
    done = await boss.recv()
    assert done == {"v": 1, "type": "result", "task_id": accepted["task_id"], "attempt": 0,
                    "id": 41, "result": {"region": "east"}}  # no trace_id: accepted came first
    server.cancel()


async def test_defer_ack_makes_one_frame_for_both(reach: Reach) -> None:
    """§4 One frame for both: with ``defer_ack`` a quick outcome comes alone, carrying the
    ``trace_id`` that stands for the ``accepted``."""
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, None)
    boss = await caller(reach.url)
    single = 0
    for n in range(10):
        await boss.send(submit(n, "sales.query", {"region": "r"}, defer_ack=True))
        first = await boss.recv()
        if first["type"] == "result":
            assert first["id"] == n and len(first["trace_id"]) == 32
            single += 1
        else:
            assert first["type"] == "accepted"
            assert "trace_id" not in await boss.outcome(n)
    assert single >= 5  # a quick call answers within the 50 ms it may wait
    server.cancel()


async def test_a_deferred_ack_still_comes_for_a_slow_task_behind_quick_ones(
        reach: Reach) -> None:
    """§4 ``defer_ack``: quick outcomes answered alone do not hold up, nor take away, the
    ``accepted`` of a slower task submitted after them: it comes once its 50 ms are up."""
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, "quick")
    holder = await agent(reach.url, "holder", [{"name": "job.hold", "latency_ms": 5000}])
    boss = await caller(reach.url)
    for n in range(3):
        await boss.send(submit(n, "sales.query", {"region": "r"}, defer_ack=True))
        assert (await boss.outcome(n))["result"] == "quick"
    await boss.send(submit(9, "job.hold", defer_ack=True))
    held = await holder.expect("invoke")
    accepted = await boss.expect("accepted", timeout=1.0)
    assert accepted["id"] == 9 and accepted["task_id"] == held["task_id"]
    await answer(holder, held, "slow")
    assert (await boss.outcome(9))["result"] == "slow"
    await boss.silent(0.1)  # and no late `accepted` for the quick ones
    server.cancel()


async def test_the_idempotency_key_is_looked_up_before_any_other_check(reach: Reach) -> None:
    """§4 Checks before acceptance, step 4: a used key for the same capability returns the
    first task even with params that fail the schema and with no agent online; for another
    capability (even an unknown one) it is invalid_params naming the first task."""
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, "first")
    boss = await caller(reach.url, "keyed")
    await boss.send(submit(1, "sales.query", {"region": "east"}, idempotency_key="k"))
    first = await boss.outcome(1)
    assert first["result"] == "first"
    server.cancel()
    await worker.close()
    await boss.send(submit(2, "sales.query", {"wrong": 1}, idempotency_key="k"))
    dup = await boss.recv()
    assert dup["type"] == "accepted" and dup["duplicate"] is True
    assert dup["task_id"] == first["task_id"]
    assert (await boss.outcome(2))["result"] == "first"
    await boss.send(submit(3, "no.such", {}, idempotency_key="k"))
    refused = (await boss.outcome(3))["error"]
    assert refused["code"] == "invalid_params" and "already used for 'sales.query'" in \
        refused["message"]
    assert refused["details"]["task_id"] == first["task_id"]
    # Without the key, the same submit meets the later checks: no_route for the unknown name
    await boss.send(submit(4, "no.such", {}))
    assert (await boss.outcome(4))["error"]["code"] == "no_route"


async def test_checks_in_order_no_route_unauthorized_invalid_unavailable() -> None:
    async with Reach.start(heartbeat_interval=0.1, tokens={"t-a": "sales", "t-c": "planner"},
                           serves={"sales": ["sales.*"]},
                           permissions={"planner": ["sales.*"]}) as reach:
        worker = await agent(reach.url, "sales", [SALES, {"name": "sales.write"}],
                             token="t-a")
        boss = await caller(reach.url, "planner", token="t-c")
        await boss.send(submit(1, "sales.qurey", {"bad": 1}))
        e = (await boss.outcome(1))["error"]
        assert e["code"] == "no_route" and e["details"]["suggestions"][0] == "sales.query"
        await boss.send(submit(2, "sales.query", {"bad": 1}))
        assert (await boss.outcome(2))["error"]["code"] == "invalid_params"
        worker.stop_beat()
        await worker.send({"v": 1, "type": "deregister"})
        await asyncio.sleep(0.02)
        await boss.send(submit(3, "sales.query", {"bad": 1}))  # schema before online
        assert (await boss.outcome(3))["error"]["code"] == "invalid_params"
        # (a call, marked by defer_ack: a submit would wait for an agent, §8 the backlog)
        await boss.send(submit(4, "sales.query", {"region": "e"}, defer_ack=True))
        e = (await boss.outcome(4))["error"]
        assert e["code"] == "unavailable" and e["details"]["capability"] == "sales.query"
    async with Reach.start(tokens={"t-a": "sales", "t-c": "planner"},
                           serves={"sales": ["sales.*"]},
                           permissions={"planner": ["other.*"]}) as reach:
        await agent(reach.url, "sales", [SALES], token="t-a")
        boss = await caller(reach.url, "planner", token="t-c")
        await boss.send(submit(5, "sales.query", {"bad": 1}))  # permission before schema
        e = (await boss.outcome(5))["error"]
        assert e["code"] == "unauthorized" and e["details"]["capability"] == "sales.query"


async def test_a_key_is_private_to_its_caller(reach: Reach) -> None:
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, None)
    one, two = await caller(reach.url, "one"), await caller(reach.url, "two")
    await one.send(submit(1, "sales.query", {"region": "one"}, idempotency_key="shared"))
    await two.send(submit(1, "sales.query", {"region": "two"}, idempotency_key="shared"))
    a, b = await one.outcome(1), await two.outcome(1)
    assert a["result"] == {"region": "one"} and b["result"] == {"region": "two"}
    assert a["task_id"] != b["task_id"]
    server.cancel()


async def test_wait_false_then_ask_for_the_outcome_elsewhere(reach: Reach) -> None:
    worker = await agent(reach.url, "sales", [SALES])
    boss = await caller(reach.url, "later")
    await boss.send(submit(1, "sales.query", {"region": "w"}, wait=False))
    accepted = await boss.expect("accepted", id=1)
    await answer(worker, await worker.expect("invoke"), "west")
    await boss.silent(0.05)  # not pushed: this connection did not ask for it
    other = await caller(reach.url, "later")
    await other.send({"v": 1, "type": "result", "id": 9, "task_id": accepted["task_id"]})
    done = await other.recv()
    assert done["type"] == "result" and done["id"] == 9 and done["result"] == "west"
    await other.send({"v": 1, "type": "status", "id": 10, "task_id": accepted["task_id"]})
    task = await other.recv()
    assert task["type"] == "task" and task["id"] == 10
    assert task["task"]["state"] == "succeeded" and task["task"]["result"] == "west"


async def test_submit_by_intent(reach: Reach) -> None:
    worker = await agent(reach.url, "sales", [SALES])
    server = await serve_forever(worker, "by intent")
    boss = await caller(reach.url)
    await boss.send({"v": 1, "type": "submit", "id": 1, "intent": "查一下上季度华东区的销售额",
                     "params": {"region": "east"}})
    assert (await boss.outcome(1))["result"] == "by intent"
    await boss.send({"v": 1, "type": "submit", "id": 2, "intent": "book a flight"})
    e = (await boss.outcome(2))["error"]
    assert e["code"] == "no_route" and e["details"]["intent"] == "book a flight"
    await boss.send({"v": 1, "type": "submit", "id": 3})
    e = (await boss.outcome(3))["error"]
    assert e["code"] == "invalid_params" and "reason" in e["details"]
    server.cancel()


async def test_the_callers_timeout_bounds_the_whole_task(reach: Reach) -> None:
    await agent(reach.url, "mute", [{"name": "conf.mute", "idempotent": True}])
    boss = await caller(reach.url)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await boss.send(submit(1, "conf.mute", timeout=0.2))
    e = (await boss.outcome(1))["error"]
    assert e["code"] == "timeout"
    assert 0.15 < loop.time() - started < 1.5


async def test_a_caller_cancels_its_task_and_the_agent_is_told_to_stop(reach: Reach) -> None:
    """§4 ``cancel`` (caller → coordinator) and §3 ``cancel`` (coordinator → agent): the task
    ends ``cancelled``, its waiter hears the ``cancelled`` error, the request is answered with
    the task's view, and the agent running it gets a ``cancel`` for its attempt. Another
    caller's cancel of it is refused; a cancel after the end changes nothing."""
    worker = await agent(reach.url, "slow", [{"name": "job.long", "latency_ms": 60_000}])
    boss = await caller(reach.url, "planner")
    await boss.send(submit(1, "job.long"))
    accepted = await boss.expect("accepted", id=1)
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
    other = await caller(reach.url, "someone-else")
    await other.send({"v": 1, "type": "cancel", "id": 5, "task_id": accepted["task_id"]})
    refused = await other.expect("error", id=5)
    assert refused["error"]["code"] == "invalid_params"  # not its task: as if there were none
    runner = await caller(reach.url, "slow")  # the agent's principal: it may read, not cancel
    await runner.send({"v": 1, "type": "cancel", "id": 6, "task_id": accepted["task_id"]})
    assert (await runner.expect("error", id=6))["error"]["code"] == "unauthorized"
    await boss.send({"v": 1, "type": "cancel", "id": 2, "task_id": accepted["task_id"],
                     "attempt": 0})
    error = (await boss.outcome(1))["error"]
    assert error["code"] == "cancelled" and error["message"] == "cancelled by planner"
    view = await boss.expect("task", id=2)
    assert view["task"]["state"] == "cancelled"
    assert [a["outcome"] for a in view["task"]["attempts"]] == ["cancelled"]
    cancel = await worker.expect("cancel")
    assert (cancel["task_id"], cancel["attempt"]) == (invoke["task_id"], 1)
    # The agent's answer to a cancelled attempt is late: told once, changes nothing.
    await answer(worker, invoke, "too late")
    late = await worker.expect("error")
    assert late["error"]["code"] == "timeout" and late["error"]["details"]["reason"] == \
        "cancelled"
    await boss.send({"v": 1, "type": "cancel", "id": 3, "task_id": accepted["task_id"]})
    again = await boss.expect("task", id=3)
    assert again["task"]["state"] == "cancelled"
