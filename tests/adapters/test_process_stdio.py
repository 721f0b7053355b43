"""ProcessAgent in stdio mode: one long-lived JSON-lines process (tests/adapters/tools/
stdio_tool.py), driven through a real coordinator and a real client."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from reach import Client, Reach, TaskError
from reach.adapters import ProcessAgent
from reach.core.backoff import Backoff
from reach.errors import ReachError, TaskFailed
from reach.testing import wait_until

TOOL = str(Path(__file__).parent / "tools" / "stdio_tool.py")
FAST = dict(heartbeat_interval=0.05, suspect_after=2, offline_after=40,
            backoff=Backoff(base=0.01, cap=0.05))
CAPS: dict[str, Any] = {"tool.run": {"latency_ms": 1000},
                        "tool.stream": {"latency_ms": 1000, "streaming": True}}


def stdio(**kw: Any) -> ProcessAgent:
    kw = {"restart_delay": 0.02, "kill_grace": 0.2, **kw}
    return ProcessAgent("worker", [sys.executable, TOOL], kw.pop("capabilities", CAPS),
                        mode="stdio", **kw)


async def test_concurrent_calls_are_multiplexed_over_one_process(tmp_path: Path) -> None:
    agent = stdio(env={"MY_VAR": "declared"}, cwd=str(tmp_path))
    assert agent.describe() == {"argv": [sys.executable, TOOL], "mode": "stdio"}
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(agent)
        assert view["kind"] == "process" and view["state"] == "online"
        async with Client.connect(reach.url, caller="planner") as client:
            began = time.monotonic()
            # The slowest is sent first: replies come back out of order, matched by id.
            results = await asyncio.gather(*(
                client.call("tool.run", {"op": "sleep", "s": 0.05 * (8 - i), "i": i},
                            idempotency_key=f"k{i}") for i in range(8)))
            took = time.monotonic() - began
            handle = await client.submit("tool.run", {"op": "echo"})
            last = await handle.result(timeout=5)
    assert [r["params"]["i"] for r in results] == list(range(8))
    assert took < 0.05 * sum(range(1, 9))  # they ran at once, not one after the other
    assert {r["pid"] for r in results} == {last["pid"]}  # one process served them all
    assert last["cwd"] == str(tmp_path) and last["my_var"] == "declared"
    context = last["context"]
    assert context["task_id"] == handle.task_id and context["trace_id"] == handle.trace_id
    assert context["capability"] == "tool.run" and context["attempt"] == 1
    assert context["caller"] == "planner" and context["idempotency_key"]
    assert context["traceparent"].startswith(f"00-{handle.trace_id}-")
    assert results[0]["context"]["idempotency_key"].endswith("k0")


async def test_a_crash_faults_the_calls_in_flight_and_the_process_is_restarted() -> None:
    agent = stdio()
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        first = agent.pid
        assert first is not None
        async with Client.connect(reach.url) as client:
            hung = [asyncio.ensure_future(client.call("tool.run", {"op": "hang"}))
                    for _ in range(2)]
            await wait_until(lambda: reach.agents()[0]["inflight"] == 2)
            with pytest.raises(TaskFailed) as crashed:
                await client.call("tool.run", {"op": "crash"})
            for call in hung:
                with pytest.raises(TaskFailed, match="exit code 3"):
                    await call
            await wait_until(lambda: agent.pid not in (None, first))
            await wait_until(lambda: reach.agents()[0]["state"] == "online")  # its next check
            assert (await client.call("tool.run", {"op": "echo"}))["pid"] == agent.pid
        view = reach.agents()[0]
    message = crashed.value.message
    assert "exit code 3" in message and "fatal: out of cheese" in message
    assert "restarted" in message and not isinstance(crashed.value, TaskError)
    assert agent.restarts == 1 and view["faults"] == 3


async def test_a_call_given_up_on_is_sent_a_cancel_line_and_forgotten() -> None:
    agent = stdio(capabilities={"tool.run": {"latency_ms": 100}})
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError) as err:
                await client.call("tool.run", {"op": "hang"})  # times out after 120 ms
            assert err.value.code == "timeout"
            await wait_until(lambda: reach.agents()[0]["inflight"] == 0)
            assert await client.call("tool.run", {"op": "cancelled"}) == [1]


async def test_error_replies_are_answers_or_faults() -> None:
    async with Reach.start(**FAST) as reach:
        await reach.attach(stdio())
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskError, match="no such thing") as answered:
                await client.call("tool.run", {"op": "answer"})
            assert answered.value.details["status"] == 404
            assert reach.agents()[0]["faults"] == 0
            with pytest.raises(TaskFailed, match="backend down") as faulted:
                await client.call("tool.run", {"op": "fault"})
            assert not isinstance(faulted.value, TaskError)
            assert reach.agents()[0]["faults"] == 1


async def test_stray_lines_are_skipped_and_logged_once_in_a_while(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "reach.adapters.process")
    agent = stdio()
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            for _ in range(3):
                assert (await client.call("tool.run", {"op": "garbage"}))["params"]
    assert agent._stdio is not None and agent._stdio.garbage == 4  # the banner and 3 more
    warned = [r for r in caplog.records if "not a JSON reply" in r.getMessage()]
    assert len(warned) == 1 and "stdio tool ready" in warned[0].getMessage()


async def test_a_line_past_the_bound_faults_and_restarts_the_process() -> None:
    agent = stdio(max_output=4096)
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        first = agent.pid
        async with Client.connect(reach.url) as client:
            assert len(await client.call("tool.run", {"op": "long", "n": 3000})) == 3000
            with pytest.raises(TaskFailed, match="a line longer than 4096 bytes"):
                await client.call("tool.run", {"op": "long", "n": 10_000})
            await wait_until(lambda: agent.pid not in (None, first))
            await wait_until(lambda: reach.agents()[0]["state"] == "online")  # its next check
            assert (await client.call("tool.run", {"op": "echo"}))["pid"] == agent.pid


async def test_chunk_lines_stream_a_result() -> None:
    async with Reach.start(**FAST) as reach:
        await reach.attach(stdio())
        async with Client.connect(reach.url) as client:
            chunks = [c async for c in client.stream("tool.stream", {"op": "chunks", "n": 3})]
    assert chunks[:3] == ["part 0", "part 1", "part 2"]


async def test_health_follows_the_process_and_its_pings() -> None:
    agent = stdio(ping=True, restart_delay=0.3)
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        assert await agent.check()  # a ping line answered
        pid = agent.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await wait_until(lambda: not agent._stdio.running)  # type: ignore[union-attr]
        assert not await agent.check()
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError):  # nothing runs to take it: not delivered
                await client.call("tool.run", {"op": "echo"}, timeout=0.2)
        await wait_until(lambda: reach.agents()[0]["state"] == "suspected")
        await wait_until(lambda: reach.agents()[0]["state"] == "online", timeout=2)
        assert agent.pid != pid and await agent.check()


async def test_detach_ends_the_process() -> None:
    agent = stdio()
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        pid = agent.pid
        assert pid is not None
        await reach.detach("worker")
        assert agent.pid is None and not os.path.exists(f"/proc/{pid}")


def test_stdio_declarations_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="answer_codes apply to mode = 'per-call'"):
        ProcessAgent("x", ["cat"], {"a.b": {}}, mode="stdio", answer_codes=[2])
    with pytest.raises(ValueError, match=r"\['output'\] apply to mode = 'per-call' only"):
        ProcessAgent("x", ["cat"], {"a.b": {"output": "text"}}, mode="stdio")
