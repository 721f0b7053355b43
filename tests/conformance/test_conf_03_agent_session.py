"""docs/protocol.md §3, the agent session: heartbeats and liveness, invoke, echoing task_id
and attempt, ack, outcomes (result, deliberate answer, fault), streaming, one key never run
twice, answers to attempts that are not in flight (late or wrong), and coordinator errors."""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import agent, answer, caller, submit, wait_state

from reach import Reach

ECHO = {"name": "conf.echo", "idempotent": True, "latency_ms": 50}


async def test_registration_starts_the_liveness_clock_and_beats_keep_it() -> None:
    """§3 Heartbeats: an agent that never beats is online from its registration until
    suspect_after intervals have passed, then suspected, then offline; a beat brings it
    back."""
    async with Reach.start(heartbeat_interval=0.05, suspect_after=2, offline_after=3) as reach:
        loop = asyncio.get_running_loop()
        peer = await agent(reach.url, "quiet", [ECHO], beat=False)
        registered = loop.time()
        assert peer.welcome["heartbeat_interval"] == 0.05
        states = [a["state"] for a in reach.agents() if a["name"] == "quiet"]
        assert states == ["online"]  # registration alone counts as a sign of life
        await wait_state(reach, "quiet", "suspected")
        assert loop.time() - registered >= 0.1 - 0.01  # 2 × 50 ms with no beat
        await wait_state(reach, "quiet", "offline")
        assert loop.time() - registered >= 0.15 - 0.01
        await peer.send({"v": 1, "type": "heartbeat", "inflight": 0, "queue_depth": 0,
                         "load": 0.0})
        await wait_state(reach, "quiet", "online")
        # Beating at the interval keeps it online across many intervals.
        peer.beat(0.025)
        await asyncio.sleep(0.3)
        assert [a["state"] for a in reach.agents() if a["name"] == "quiet"] == ["online"]
        # Results and acks are not signs of life: only heartbeats (and registering) are.
        await peer.close()


async def test_invoke_echo_ack_result(reach: Reach) -> None:
    """§3 Invoke / Echo / Ack / Outcome: the invoke carries the documented fields, the
    normalized name and the scoped key; ack then result ends the attempt."""
    worker = await agent(reach.url, "echoer", [{**ECHO, "name": "Conf.Echo"}])
    assert worker.welcome["capabilities"] == ["conf.echo"]  # "Conf.Echo" normalized (§7)
    boss = await caller(reach.url, "boss")
    await boss.send(submit(1, "conf.echo", {"x": 1}, idempotency_key="k-1", timeout=5))
    invoke = await worker.expect("invoke")
    assert invoke["capability"] == "conf.echo" and invoke["attempt"] == 1
    assert invoke["params"] == {"x": 1} and invoke["caller"] == "boss"
    assert invoke["idempotency_key"] == "boss/k-1"  # §13: keys are scoped to their caller
    assert len(invoke["task_id"]) == 32 and len(invoke["trace_id"]) == 32
    assert 0 < invoke["deadline_ms"] <= 5000
    assert set(invoke) <= {"v", "type", "task_id", "attempt", "capability", "params",
                           "idempotency_key", "trace_id", "parent_task_id", "traceparent",
                           "deadline_ms", "caller"}
    await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"], "attempt": 1})
    await answer(worker, invoke, {"echo": 1})
    done = await boss.outcome(1)
    assert done["type"] == "result" and done["result"] == {"echo": 1}
    assert done["task_id"] == invoke["task_id"]


async def test_a_result_alone_counts_as_the_ack(reach: Reach) -> None:
    worker = await agent(reach.url, "quick", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo"))
    await answer(worker, await worker.expect("invoke"), "fast")
    assert (await boss.outcome(1))["result"] == "fast"


async def test_a_deliberate_answer_reaches_the_caller_with_the_agents_name(
        reach: Reach) -> None:
    """§3 Outcome / §6: an error with details.answer true is final and reaches the caller
    with its code, message and details, plus ``agent`` (added by the coordinator: this agent
    did not send it)."""
    worker = await agent(reach.url, "answerer", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "no such customer",
                                 "details": {"answer": True, "customer": 7}}})
    done = await boss.outcome(1)
    assert done["type"] == "error"
    assert done["error"] == {"code": "task_failed", "message": "no such customer",
                             "details": {"answer": True, "customer": 7, "agent": "answerer"}}
    await worker.silent(0.1)  # final: never retried, although the capability is idempotent
    # An agent that names itself (as the SDK does) is left as it said.
    await boss.send(submit(2, "conf.echo"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "invalid_params", "message": "bad",
                                 "details": {"answer": True, "agent": "self-named"}}})
    assert (await boss.outcome(2))["error"]["details"] == {"answer": True,
                                                           "agent": "self-named"}


async def test_a_fault_is_retried_for_an_idempotent_capability(reach: Reach) -> None:
    worker = await agent(reach.url, "faulty", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo", max_retries=1))
    first = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "error", "task_id": first["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "disk full",
                                 "details": {"answer": False}}})
    second = await worker.expect("invoke", timeout=3)  # after a backoff (0.5 s ± 20 %)
    assert (second["task_id"], second["attempt"]) == (first["task_id"], 2)
    assert second["idempotency_key"] == first["idempotency_key"]
    await answer(worker, second, "second time")
    assert (await boss.outcome(1, timeout=3))["result"] == "second time"


async def test_streaming_chunks_then_the_list(reach: Reach) -> None:
    worker = await agent(reach.url, "streamer", [{"name": "conf.stream", "streaming": True}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.stream"))
    invoke = await worker.expect("invoke")
    for seq, data in enumerate(["a", "b"]):
        await worker.send({"v": 1, "type": "chunk", "task_id": invoke["task_id"],
                           "attempt": 1, "seq": seq, "data": data})
    await answer(worker, invoke, ["a", "b"])
    chunks = [await boss.expect("chunk", id=1) for _ in range(2)]
    assert [(c["seq"], c["data"], c["attempt"]) for c in chunks] == [(0, "a", 0), (1, "b", 0)]
    assert (await boss.outcome(1))["result"] == ["a", "b"]


async def test_a_wrong_attempt_is_answered_with_a_protocol_error(reach: Reach) -> None:
    """§3 Echo: an answer naming a task in flight here with another attempt number gets a
    protocol_error naming the attempt expected; it does not count as an ack or outcome, and
    the right one still does."""
    worker = await agent(reach.url, "sloppy", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo"))
    invoke = await worker.expect("invoke")
    tid = invoke["task_id"]
    for kind in ("ack", "result"):
        await worker.send({"v": 1, "type": kind, "task_id": tid, "attempt": 7, "result": 1})
        error = await worker.expect("error")
        assert "task_id" not in error and "id" not in error  # about a frame, not a task
        assert error["error"]["code"] == "protocol_error"
        assert error["error"]["details"] == {"type": kind, "task_id": tid, "attempt": 7,
                                             "expected": 1}
        assert "attempt 7" in error["error"]["message"]
    await answer(worker, invoke, "right")
    assert (await boss.outcome(1))["result"] == "right"
    # A task with nothing in flight here (already answered) is ignored, as before.
    await answer(worker, invoke, "again")
    await worker.silent(0.1)


async def test_a_late_result_is_told_it_came_too_late() -> None:
    """§3 Late answers: a result for an attempt that timed out gets an ``error`` frame with
    code ``timeout``, its task_id and attempt, once; a retry of the same task at the same
    agent is still answered normally."""
    async with Reach.start(heartbeat_interval=1.0) as reach:
        worker = await agent(reach.url, "slowpoke", [{**ECHO, "latency_ms": 40}])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.echo", max_retries=1))
        first = await worker.expect("invoke")
        await worker.send({"v": 1, "type": "ack", "task_id": first["task_id"], "attempt": 1})
        # completion timeout = 40 ms × 1.2 = 48 ms; the retry comes after a 0.4-0.6 s backoff
        second = await worker.expect("invoke", timeout=3)
        assert second["attempt"] == 2
        await answer(worker, first, "too late")
        notice = await worker.expect("error")
        assert notice["task_id"] == first["task_id"] and notice["attempt"] == 1
        assert notice["error"]["code"] == "timeout"
        assert notice["error"]["details"] == {"reason": "timeout", "late": "result"}
        await worker.send({"v": 1, "type": "error", "task_id": first["task_id"],
                           "attempt": 1, "error": {"code": "task_failed", "message": "x"}})
        await answer(worker, second, "in time")
        assert (await boss.outcome(1))["result"] == "in time"
        await worker.silent(0.1)  # told once per attempt


async def test_a_late_ack_of_an_undelivered_attempt_is_told_so() -> None:
    """An invoke of an idempotent capability not acknowledged within the ack timeout is taken
    as never delivered; an ack that comes later is told (reason ``undelivered``) so the agent
    can drop the work. (Work that is not idempotent waits for the late ack instead:
    test_conf_03_at_most_once.py.)"""
    async with Reach.start(heartbeat_interval=1.0, ack_timeout=0.05) as reach:
        worker = await agent(reach.url, "deaf", [{"name": "conf.write", "latency_ms": 500,
                                                  "idempotent": True}])
        boss = await caller(reach.url)
        await boss.send(submit(1, "conf.write", max_retries=0))
        invoke = await worker.expect("invoke")
        assert (await boss.outcome(1))["error"]["code"] in ("unavailable", "task_failed",
                                                            "timeout")
        await worker.send({"v": 1, "type": "ack", "task_id": invoke["task_id"],
                           "attempt": 1})
        notice = await worker.expect("error")
        assert notice["error"]["code"] == "timeout"
        assert notice["error"]["details"]["reason"] == "undelivered"
        assert (notice["task_id"], notice["attempt"]) == (invoke["task_id"], 1)


async def test_one_key_arrives_again_on_a_retry(reach: Reach) -> None:
    """§3 Idempotency: the same key comes back with a higher attempt after a fault; the
    invoke's key is what the agent's cache must be keyed by."""
    worker = await agent(reach.url, "keyed", [ECHO])
    boss = await caller(reach.url, "k-caller")
    await boss.send(submit(1, "conf.echo", idempotency_key="once", max_retries=1))
    seen: list[tuple[str, int]] = []
    invoke: dict[str, Any] = await worker.expect("invoke")
    seen.append((invoke["idempotency_key"], invoke["attempt"]))
    await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"], "attempt": 1,
                       "error": {"code": "task_failed", "message": "flaky"}})
    invoke = await worker.expect("invoke", timeout=3)
    seen.append((invoke["idempotency_key"], invoke["attempt"]))
    await answer(worker, invoke, "ok")
    assert (await boss.outcome(1))["result"] == "ok"
    assert seen == [("k-caller/once", 1), ("k-caller/once", 2)]


async def test_errors_without_task_id_from_the_agent_are_logged_and_ignored(
        reach: Reach) -> None:
    worker = await agent(reach.url, "chatty", [ECHO])
    await worker.send({"v": 1, "type": "error",
                       "error": {"code": "agent_trouble", "message": "my disk is slow"}})
    await worker.silent(0.05)
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo"))
    await answer(worker, await worker.expect("invoke"), 1)
    assert (await boss.outcome(1))["result"] == 1


async def test_deregister_drains_then_no_new_work(reach: Reach) -> None:
    """§2.6 / §3: after deregister the agent keeps its in-flight work, gets no new work (a
    call is refused at once; a submit waits in the backlog for another agent, §8)."""
    worker = await agent(reach.url, "leaver", [ECHO])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.echo"))
    invoke = await worker.expect("invoke")
    await worker.send({"v": 1, "type": "deregister"})
    await asyncio.sleep(0.02)
    await boss.send(submit(2, "conf.echo", defer_ack=True))
    refused = await boss.outcome(2)
    assert refused["error"]["code"] == "unavailable"
    assert "stopped by itself" in refused["error"]["message"]
    await boss.send(submit(3, "conf.echo"))
    await boss.expect("accepted", id=3)  # it waits for an agent that takes new work
    await answer(worker, invoke, "finished")
    assert (await boss.outcome(1))["result"] == "finished"
