"""Error messages that misled (issue 25, item 15), asserted through what people read: an SDK
exception's text, a dashboard command's output, an error's ``details``.

- An agent that closed itself was reported "drained by an operator": the operator went looking
  for a drain to undo.
- The Python SDK said "token not accepted" when no token was given (REST said it right).
- ``reach-dash`` with a wrong token printed "admin token refused: admin token refused; ...".
- ``TaskError.details`` was flat (``{"exit_code": 2}``) while ``TaskFailed.details`` nested the
  same facts (``{"remote": {"details": {"exit_code": 1}}}``): now both have them at the top.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from conformance.rawpeer import agent as raw_agent

from reach import Agent, Client, Reach, TaskError, TaskFailed, Unauthorized, Unavailable
from reach.testing import Cluster

ROOT = Path(__file__).resolve().parents[1]


async def test_an_agent_that_closed_itself_is_not_called_drained_by_an_operator() -> None:
    cluster = await Cluster.start()
    try:
        async def write(entry: str) -> str:
            return entry

        agent = await cluster.add_agent("ledger-writer", {"ledger.write": write})
        client = await cluster.client("planner")
        await agent.close()
        with pytest.raises(Unavailable) as err:
            await client.call("ledger.write", {"entry": "x"})
        assert "operator" not in str(err.value)
        assert "ledger-writer stopped by itself (it deregistered: agent.close())" in str(err.value)
        view = cluster.reach.agents()[0]
        assert (view["draining"], view["drained_by"]) == (True, "agent")
        # An operator's drain is still called one.
        await cluster.add_agent("ledger-writer", {"ledger.write": write})
        cluster.reach.drain("ledger-writer")
        with pytest.raises(Unavailable) as err:
            await client.call("ledger.write", {"entry": "x"})
        assert "ledger-writer drained by an operator" in str(err.value)
        assert cluster.reach.agents()[0]["drained_by"] == "operator"
    finally:
        await cluster.close()


async def test_no_token_is_called_no_token_in_the_python_sdk_as_over_rest() -> None:
    async with Reach.start(tokens={"t-planner": "planner", "t-worker": "worker"}) as reach:
        with pytest.raises(Unauthorized) as err:
            await Client.connect(reach.url, caller="planner")
        assert str(err.value).startswith("no token given for caller 'planner'")
        assert "not accepted" not in str(err.value)
        agent = Agent("worker", reconnect_base=0.02)

        @agent.capability("job.run")
        async def run() -> int:
            return 1

        with pytest.raises(Unauthorized) as err:
            await agent.connect(reach.url)
        assert str(err.value).startswith("no token given for agent 'worker'")
        # A wrong token is still "not accepted".
        with pytest.raises(Unauthorized) as err:
            await Client.connect(reach.url, caller="planner", token="typo")
        assert str(err.value).startswith("token not accepted for caller 'planner'")


async def test_reach_dash_says_admin_token_refused_once() -> None:
    async with Reach.start(admin_token="right") as reach:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("REACH_ADMIN_TOKEN", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dashboard", "--url", reach.url, "--token", "wrong",
            "--screenshot", os.devnull, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    said = err.decode()
    assert proc.returncode == 1
    assert said.count("admin token refused") == 1, said
    assert said.startswith("reach-dash: no screenshot: admin token refused; use the "
                           "coordinator's admin token")


async def test_a_fault_and_an_answer_carry_their_facts_in_one_shape() -> None:
    cluster = await Cluster.start(max_retries=0)
    try:
        async def answer(n: int) -> int:
            raise TaskError("exit status 2", exit_code=2)

        async def fault(n: int) -> int:
            raise OSError("exit status 1")

        await cluster.add_agent("runner", {"job.answer": answer, "job.fault": fault})
        client = await cluster.client()
        with pytest.raises(TaskError) as answered:
            await client.call("job.answer", {"n": 1})
        with pytest.raises(TaskFailed) as faulted:
            await client.call("job.fault", {"n": 1})
        assert not isinstance(faulted.value, TaskError)
        a, f = answered.value.details, faulted.value.details
        assert (a["answer"], a["agent"], a["exit_code"]) == (True, "runner", 2)
        assert (f["answer"], f["agent"], f["type"]) == (False, "runner", "OSError")
        # What was nested is still there (err.remote), for callers that read it.
        assert faulted.value.remote["details"]["type"] == "OSError"
        assert faulted.value.remote["agent"] == "runner"
    finally:
        await cluster.close()


async def test_an_exit_code_is_read_the_same_way_from_a_fault_and_an_answer() -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await raw_agent(reach.url, "tool", [{"name": "tool.run", "latency_ms": 200}])
        client = await Client.connect(reach.url, caller="planner")
        try:
            errors = []
            for answer in (True, False):  # the agent's own words: a TaskError, then a crash
                call = asyncio.ensure_future(client.call("tool.run", {}, timeout=5))
                invoke = await worker.expect("invoke")
                details = {"exit_code": 2 if answer else 1, **({"answer": True} if answer else {})}
                await worker.send({"v": 1, "type": "error", "task_id": invoke["task_id"],
                                   "attempt": invoke["attempt"],
                                   "error": {"code": "task_failed", "message": "exit status",
                                             "details": details}})
                with pytest.raises(TaskFailed) as err:
                    await call
                errors.append(err.value)
            answered, faulted = errors
            assert isinstance(answered, TaskError) and not isinstance(faulted, TaskError)
            assert answered.details["exit_code"] == 2 and faulted.details["exit_code"] == 1
            assert faulted.remote["details"] == {"exit_code": 1}  # as before, for old readers
        finally:
            await client.close()
            await worker.close()
