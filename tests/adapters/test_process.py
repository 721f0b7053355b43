"""ProcessAgent in per-call mode: a real command per call (tests/adapters/tools/cli_tool.py and
a shell pipeline), driven through a real coordinator and a real client."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from reach import Client, Reach, TaskError
from reach.adapters import ProcessAgent
from reach.core.backoff import Backoff
from reach.errors import ReachError, TaskFailed
from reach.testing import wait_until

TOOL = str(Path(__file__).parent / "tools" / "cli_tool.py")
FAST = dict(heartbeat_interval=0.05, suspect_after=2, offline_after=40,
            backoff=Backoff(base=0.01, cap=0.05))


def tool(name: str, capabilities: dict[str, Any], *mode: str, **kw: Any) -> ProcessAgent:
    return ProcessAgent(name, [sys.executable, TOOL, *mode], capabilities, **kw)


def gone(pid: int) -> bool:
    """The process no longer runs: no such pid, or only a zombie left for init to reap (an
    orphaned grandchild is reparented to PID 1, which in a container may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_params_on_stdin_and_the_call_context_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_TEST_SECRET", "the coordinator's, not the tool's")
    agent = tool("cli", {"tool.echo": {"latency_ms": 2000, "idempotent": True}}, "echo",
                 env={"MY_VAR": "declared"}, cwd=str(tmp_path))
    assert agent.describe() == {"argv": [sys.executable, TOOL, "echo"], "mode": "per-call"}
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(agent)
        assert view["kind"] == "process" and view["state"] == "online"
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("tool.echo", {"region": "east", "n": [1, 2]},
                                         idempotency_key="k-1")
            got = await handle.result(timeout=5)
    assert got["stdin"] == {"region": "east", "n": [1, 2]}
    assert got["cwd"] == str(tmp_path)
    env = got["env"]
    assert env["MY_VAR"] == "declared"
    assert "REACH_TEST_SECRET" not in env  # a minimal environment is inherited, not all of it
    assert env["REACH_TASK_ID"] == handle.task_id and env["REACH_TRACE_ID"] == handle.trace_id
    assert env["REACH_CAPABILITY"] == "tool.echo" and env["REACH_ATTEMPT"] == "1"
    assert env["REACH_CALLER"] == "planner" and env["REACH_IDEMPOTENCY_KEY"].endswith("k-1")
    assert env["TRACEPARENT"].startswith(f"00-{handle.trace_id}-")


async def test_inherit_env_passes_the_whole_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_TEST_SECRET", "shared on purpose")
    async with Reach.start(**FAST) as reach:
        await reach.attach(tool("cli", {"tool.echo": {}}, "echo", inherit_env=True))
        async with Client.connect(reach.url) as client:
            got = await client.call("tool.echo", {}, timeout=5)
    assert got["env"]["REACH_TEST_SECRET"] == "shared on purpose"
    assert 0 < int(got["env"]["REACH_DEADLINE_MS"]) <= 5000  # the caller's time left


async def test_templated_arguments_are_argv_items_never_a_shell(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    agent = tool("cli", {"geo.lookup": {"args": [str(runs), "0", "--region", "{region}",
                                                 "n={n}", "{{literal}}"],
                                        "input": "none"}}, "flaky")
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            got = await client.call("geo.lookup", {"region": "east; rm -rf / $(id)", "n": 3},
                                    timeout=5)
            assert got["argv"] == ["--region", "east; rm -rf / $(id)", "n=3", "{literal}"]
            assert got["stdin"] is None
            with pytest.raises(TaskError, match="needs the parameter 'region'"):
                await client.call("geo.lookup", {"n": 3}, timeout=5)
    assert runs.read_text().count("run") == 1  # the call that lacked a param ran nothing
    assert reach.agents()[0]["faults"] == 0


async def test_a_shell_pipeline_with_text_in_and_out() -> None:
    agent = ProcessAgent("upper", ["sh", "-c", "tr a-z A-Z"],
                         {"text.upper": {"input": "text", "output": "text"}})
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            assert await client.call("text.upper", {"text": "hello, reach\n"}, timeout=5) == {
                "text": "HELLO, REACH\n"}
            with pytest.raises(TaskError, match="'text'"):
                await client.call("text.upper", {"txt": "hello"}, timeout=5)


async def test_exit_1_is_a_fault_retried_when_idempotent_and_counted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    agent = tool("cli", {
        "flaky.run": {"args": ["flaky", str(runs), "1"], "idempotent": True,
                      "latency_ms": 2000},
        "fail.run": {"args": ["fail"], "latency_ms": 2000}})
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            got = await client.call("flaky.run", {"x": 1}, timeout=5)
            assert got["stdin"] == {"x": 1}  # the second run: the first exited 1
            assert runs.read_text().count("run") == 2
            with pytest.raises(TaskFailed) as failed:
                await client.call("fail.run", {}, timeout=5)  # not idempotent: run once
        view = reach.agents()[0]
    message = failed.value.message
    assert "exited with code 1" in message and "the real reason: disk full" in message
    assert len(message) < 2300  # stderr's tail, not all 6 KiB of it
    assert not isinstance(failed.value, TaskError)  # a fault, not an answer
    assert failed.value.details["remote"]["details"]["exit_code"] == 1
    assert view["faults"] == 2 and view["breaker_detail"]["window"] == 3


async def test_answer_codes_are_deliberate_answers() -> None:
    agent = tool("cli", {"order.get": {"idempotent": True}}, "answer", answer_codes=[2])
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskError, match="no such order") as answered:
                await client.call("order.get", {}, timeout=5)
        assert answered.value.details["exit_code"] == 2
        assert reach.agents()[0]["faults"] == 0 and reach.agents()[0]["calls"] == 1


async def test_a_hung_command_times_out_and_its_whole_group_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    agent = tool("cli", {"tool.hang": {"args": [str(pids)], "latency_ms": 300}}, "hang",
                 kill_grace=0.1)
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError) as err:
                await client.call("tool.hang", {})  # the gateway's timeout: 1.2 × 300 ms
        assert err.value.code in ("timeout", "task_failed")
        leader, grandchild = (int(p) for p in pids.read_text().split())
        # Both ignore SIGTERM: the SIGKILL after the grace ends them, grandchild included;
        # our own child is reaped (no zombie of ours is left).
        await wait_until(lambda: not os.path.exists(f"/proc/{leader}") and gone(grandchild),
                         timeout=2)
        assert reach.agents()[0]["inflight"] == 0


async def test_garbage_on_stdout_is_a_fault_saying_so() -> None:
    async with Reach.start(**FAST) as reach:
        await reach.attach(tool("cli", {"tool.talk": {}}, "garbage"))
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskFailed, match="not JSON.*hello, this is not JSON"):
                await client.call("tool.talk", {}, timeout=5)
        assert reach.agents()[0]["faults"] == 1


async def test_output_past_the_bound_is_a_fault() -> None:
    agent = tool("cli", {"tool.flood": {"args": ["flood", "{n}"], "input": "none",
                                        "output": "text"}}, max_output=4096)
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskFailed, match="more than 4096 bytes on stdout"):
                await client.call("tool.flood", {"n": 5000}, timeout=5)
            assert await client.call("tool.flood", {"n": 4096}, timeout=5) == {
                "text": "x" * 4096}


async def test_a_missing_program_is_refused_and_a_removed_one_fails_its_check(
        tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no program 'no-such-tool-here' on its PATH"):
        ProcessAgent("x", ["no-such-tool-here"], {"a.b": {}})
    with pytest.raises(ValueError, match="does not exist"):
        ProcessAgent("x", ["./missing.sh"], {"a.b": {}}, cwd=str(tmp_path))
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho '{}'\n")
    with pytest.raises(ValueError, match="not executable"):
        ProcessAgent("x", [str(script)], {"a.b": {}})
    script.chmod(0o755)
    agent = ProcessAgent("x", ["./tool.sh"], {"a.b": {}}, cwd=str(tmp_path))
    assert await agent.check()
    script.unlink()
    assert not await agent.check()


def test_declarations_say_what_is_wrong() -> None:
    sh = ["sh", "-c", "cat"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"argv": "python tool.py"}, "argv is a list of arguments, not one string"),
        ({"mode": "daemon"}, "mode must be one of"),
        ({"env": {"N": 8}}, "env N must be a string"),
        ({"cwd": "/no/such/dir"}, "is not a directory"),
        ({"answer_codes": [0]}, "exit codes from 1 to 255"),
        ({"kill_grace": 0}, "kill_grace must be a positive number"),
        ({"mode": "stdio", "capabilities": {"a.b": {"args": ["x"]}}},
         r"\['args'\] apply to mode = 'per-call' only"),
        ({"capabilities": {"a.b": {"args": ["{oops"]}}}, "a lone '{'"),
        ({"capabilities": {"a.b": {"args": "--x"}}}, "args must be a list of strings"),
        ({"capabilities": {"a.b": {"output": "xml"}}}, "output must be one of"),
        ({"capabilities": {"a.b": {"argz": []}}}, r"unknown key\(s\) \['argz'\]"),
        ({"ping": True}, "ping applies to mode = 'stdio' only"),
    ]
    for change, message in cases:
        kw: dict[str, Any] = {"argv": sh, "capabilities": {"a.b": {}}, **change}
        with pytest.raises(ValueError, match=message):
            ProcessAgent("x", **kw)


def test_an_agents_file_declares_a_process_agent(tmp_path: Path) -> None:
    from reach.adapters import parse_agents

    (agent,) = parse_agents(f'''
[[agent]]
kind = "process"
name = "geo"
argv = ["sh", "-c", "cat"]
mode = "per-call"
cwd = "{tmp_path}"
env = {{ GEO_DB = "/srv/geo.db" }}
max_concurrency = 2
answer_codes = [2]

[agent.capabilities."geo.lookup"]
args = ["--region", "{{region}}"]
output = "text"
idempotent = true
''')
    assert isinstance(agent, ProcessAgent) and agent.kind == "process"
    assert agent.describe() == {"argv": ["sh", "-c", "cat"], "mode": "per-call"}
    assert agent.env["GEO_DB"] == "/srv/geo.db" and agent.max_concurrency == 2
