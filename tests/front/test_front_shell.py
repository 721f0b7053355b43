"""A caller that is not Python: examples/call.sh (bash, curl and sed) calls a Python
``reach.Agent`` through the coordinator's front door, as the README shows."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from reach import Agent, Reach

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "call.sh"
pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                                reason="examples/call.sh needs bash and curl on PATH")


async def run_script(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "bash", str(SCRIPT), *args, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode()


async def serving(reach: Reach, token: str | None = None) -> Agent:
    agent = Agent("orders", token=token, reconnect_base=0.02)

    @agent.capability("orders.lookup", idempotent=True, latency_ms=200)
    async def lookup(order: str) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"order": order, "status": "shipped"}

    await agent.connect(reach.url)
    return agent


async def test_the_shell_example_calls_submits_and_polls_a_python_agent() -> None:
    async with Reach.start(heartbeat_interval=0.05) as reach:
        agent = await serving(reach)
        assert reach.http_url is not None
        code, out = await run_script({"REACH_HTTP": reach.http_url, "REACH_KEY": "k-1"},
                                     "orders.lookup", '{"order":"A-7"}')
        assert code == 0, out
        lines = out.splitlines()
        assert lines[0].startswith("call: 200 ") and '"status":"shipped"' in lines[0]
        task_id = lines[1].removeprefix("submitted: ")
        assert lines[2] == f"duplicate: {task_id}" and lines[3] == "status: succeeded"
        assert '"result":{"order":"A-7","status":"shipped"}' in lines[4]
        # The call and one durable task: the duplicate submit did not run again.
        assert reach.agents()[0]["calls"] == 2
        task = await reach.task(task_id)
        assert task is not None and task["caller"] == "http"
        await agent.close()


async def test_the_shell_example_with_a_token_and_a_refusal() -> None:
    async with Reach.start(heartbeat_interval=0.05,
                           tokens={"t-orders": "orders", "t-shell": "shell"}) as reach:
        agent = await serving(reach, token="t-orders")
        assert reach.http_url is not None
        env = {"REACH_HTTP": reach.http_url, "REACH_TOKEN": "t-shell"}
        code, out = await run_script(env, "orders.lookup", '{"order":"B-1"}')
        assert code == 0, out
        task = await reach.task(out.splitlines()[1].removeprefix("submitted: "))
        assert task is not None and task["caller"] == "shell"
        # A wrong token: the problem is printed as it came, and the script fails.
        code, out = await run_script({**env, "REACH_TOKEN": "nope"}, "orders.lookup", "{}")
        assert code == 1 and out.startswith("call: 401 ") and '"code":"unauthorized"' in out
        await agent.close()
