"""Operating a running ``reach serve`` from a shell (issue 29, item 1): ``reach agents``,
``reach dead-letters``, ``reach replay``, ``reach discard``, ``reach drain``, ``reach call``
run as subprocesses against a real coordinator subprocess with a fixed admin token."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from held import Held
from subprocs import REPO, free_port

from reach import Agent, Cancelled, Client, TaskFailed

TOKEN = "cli-adm1n-s3cret"


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Served:
    url: str
    broken: dict[str, bool]

    async def reach(self, *argv: str, token: str | None = TOKEN, env: dict[str, str] | None = None
                    ) -> Run:
        """``reach ARGV --url URL [--token TOKEN]`` as a subprocess, with no REACH_* set."""
        extra = ["--url", self.url] + ([] if token is None else ["--token", token])
        base = {k: v for k, v in os.environ.items() if not k.startswith("REACH_")}
        base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO),
                                                            os.environ.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "reach.cli", *argv, *extra, cwd=REPO,
            env={**base, "COLUMNS": "200", **(env or {})},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return Run(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    """A ``reach serve`` subprocess with a fixed admin token, an agent ``writer`` serving
    ``x.write`` (failing while ``broken``), and one dead letter of it."""
    port = free_port()
    log = open(tmp_path / "serve.err", "wb")  # noqa: SIM115 - closed at teardown
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "reach.cli", "serve", "--port", str(port), "--no-http",
         "--store", f"sqlite:///{tmp_path / 'r.db'}", "--heartbeat-interval", "0.05",
         "--max-retries", "0", "--admin-token", TOKEN, "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=tmp_path)
    url = f"ws://127.0.0.1:{port}"
    agent = Agent("writer", reconnect_base=0.02)
    broken = {"on": True}

    @agent.capability("x.write")
    async def write(n: int) -> int:
        if broken["on"]:
            raise RuntimeError("bad deploy")
        return n * 10

    try:
        assert coordinator.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(coordinator.stdout.readline), 30)
        assert b"listening on" in first, first
        await agent.connect(url)
        async with Client.connect(url, caller="planner") as client:
            with pytest.raises(TaskFailed):
                await client.call("x.write", {"n": 1})
        yield Served(url, broken)
    finally:
        await agent.close()
        coordinator.kill()
        coordinator.wait(10)
        if coordinator.stdout is not None:
            coordinator.stdout.close()
        log.close()


async def _dead(served: Served) -> list[dict[str, Any]]:
    """The dead letters, once the coordinator lists the one the fixture made."""
    for _ in range(50):
        run = await served.reach("dead-letters", "--json")
        assert run.rc == 0, run.err
        letters: list[dict[str, Any]] = run.json()["dead_letters"]
        if letters:
            return letters
        await asyncio.sleep(0.05)
    raise AssertionError("no dead letter listed")


async def test_dead_letters_replay_and_agents_from_a_shell(served: Served) -> None:
    [letter] = await _dead(served)
    assert (letter["capability"], letter["agent"], letter["caller"]) == ("x.write", "writer",
                                                                        "planner")
    assert "bad deploy" in letter["error"]["message"]

    human = await served.reach("dead-letters")
    assert human.rc == 0 and letter["task_id"] in human.out and "x.write" in human.out
    # a narrow terminal: nothing cut, the id to copy and the whole error are still there
    narrow = await served.reach("dead-letters", env={"COLUMNS": "60"})
    assert narrow.rc == 0 and letter["task_id"] in narrow.out
    assert letter["error"]["message"] in " ".join(narrow.out.split())
    none = await served.reach("dead-letters", "--json", "--capability", "other")
    assert none.rc == 0 and none.json() == {"dead_letters": []}

    again = await served.reach("replay", letter["task_id"], "--json")  # still broken
    assert again.rc == 9 and again.json()["state"] == "dead"
    assert again.err.startswith("reach: task_failed: ")

    served.broken["on"] = False
    fixed = await served.reach("replay", letter["task_id"], "--json")
    assert fixed.rc == 0, fixed.err
    assert fixed.json()["state"] == "succeeded" and fixed.json()["result"] == 10
    for _ in range(50):
        if (await served.reach("dead-letters", "--json")).json() == {"dead_letters": []}:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the replayed letter is still listed")

    agents = await served.reach("agents", "--json")
    assert agents.rc == 0
    [view] = agents.json()["agents"]
    assert (view["name"], view["capabilities"]) == ("writer", ["x.write"])
    table = await served.reach("agents")
    assert table.rc == 0 and "writer" in table.out and "x.write" in table.out

    missing = await served.reach("replay", "no-such-task")
    assert missing.rc == 4 and "invalid_params" in missing.err


async def test_drain_and_call_from_a_shell(served: Served) -> None:
    served.broken["on"] = False
    called = await served.reach("call", "x.write", '{"n": 4}', token=None)
    assert called.rc == 0, called.err
    assert json.loads(called.out) == 40

    drained = await served.reach("drain", "writer", "--json")
    assert drained.rc == 0, drained.err
    assert drained.json()["draining"] is True

    refused = await served.reach("call", "x.write", '{"n": 4}', "--timeout", "2", token=None)
    assert refused.rc == 6 and refused.out == ""
    assert refused.err.startswith("reach: unavailable: ")

    undrained = await served.reach("undrain", "writer", "--json")
    assert undrained.rc == 0 and undrained.json()["draining"] is False

    served.broken["on"] = True
    failed = await served.reach("call", "x.write", '{"n": 4}', token=None)
    assert failed.rc == 9 and failed.err.startswith("reach: task_failed: ")
    assert "bad deploy" in failed.err
    listed = await served.reach("call", "x.write", "[4]", token=None)
    assert listed.rc == 2 and "must be a JSON object" in listed.err
    unknown = await served.reach("call", "x.nothing", "{}", token=None)
    assert unknown.rc == 5 and "no_route" in unknown.err
    notjson = await served.reach("call", "x.write", "{n: 4", token=None)
    assert notjson.rc == 2 and "not JSON" in notjson.err


async def test_a_wrong_or_missing_token_is_unauthorized(served: Served) -> None:
    wrong = await served.reach("dead-letters", "--json", token="nope")
    assert wrong.rc == 3 and wrong.out == ""
    assert wrong.err.startswith("reach: unauthorized: ")
    missing = await served.reach("agents", token=None)
    assert missing.rc == 2 and "REACH_ADMIN_TOKEN" in missing.err
    from_env = await served.reach("agents", "--json", token=None,
                                  env={"REACH_ADMIN_TOKEN": TOKEN})
    assert from_env.rc == 0 and from_env.json()["agents"][0]["name"] == "writer"


async def test_discard_and_replay_with_new_params_from_a_shell(served: Served) -> None:
    """Needs the coordinator's settling actions (issue 29 item 2, branch i29-settle)."""
    [letter] = await _dead(served)
    discarded = await served.reach("discard", letter["task_id"], "--reason", "x", "--json")
    assert discarded.rc == 0, discarded.err
    assert discarded.json()["task_id"] == letter["task_id"]
    for _ in range(50):
        if (await served.reach("dead-letters", "--json")).json() == {"dead_letters": []}:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the discarded letter is still listed")
    kept = await served.reach("dead-letters", "--discarded", "--json")
    assert [d["task_id"] for d in kept.json()["dead_letters"]] == [letter["task_id"]]

    async with Client.connect(served.url, caller="planner") as client:
        with pytest.raises(TaskFailed):
            await client.call("x.write", {"n": 2})
    [second] = await _dead(served)
    served.broken["on"] = False
    replayed = await served.reach("replay", second["task_id"], "--params", '{"n": 5}',
                                  "--timeout", "5", "--json")
    assert replayed.rc == 0, replayed.err
    assert replayed.json()["result"] == 50


async def test_traces_find_trace_bulk_replay_and_phrases_from_a_shell(served: Served) -> None:
    [letter] = await _dead(served)
    task_id = letter["task_id"]
    listed, table = await asyncio.gather(served.reach("tasks", "--json"), served.reach("tasks"))
    assert listed.rc == 0, listed.err
    [trace] = [t for t in listed.json()["traces"] if t["root"] == "x.write"]
    assert trace["state"] == "dead" and trace["caller"] == "planner"
    assert table.rc == 0 and trace["trace_id"] in table.out and "x.write" in table.out

    found, found_json, timeline, timeline_json = await asyncio.gather(
        served.reach("find", task_id[:8]), served.reach("find", task_id, "--json"),
        served.reach("trace", trace["trace_id"]),
        served.reach("trace", trace["trace_id"], "--json"))
    assert found.rc == 0, found.err
    assert f"Trace {trace['trace_id']}" in found.out and "(dead letter)" in found.out
    assert found_json.json()["task_id"] == task_id and found_json.json()["dead_letter"]
    assert timeline.rc == 0 and "Hops" in timeline.out and "writer" in timeline.out
    assert [t["task_id"] for t in timeline_json.json()["tasks"]] == [task_id]

    # Bulk replay: one ID or a filter, not both; params only for one letter; keys checked.
    misuses = await asyncio.gather(
        served.reach("replay", task_id, "--all"),
        served.reach("replay", "--all", "--params", "{}"),
        served.reach("replay", "--filter", "colour=red"),
        served.reach("replay", "--filter", "since=yesterday"))
    for run, said in zip(misuses, ["not both", "change one letter", "KEY=VALUE",
                                   "epoch seconds"], strict=True):
        assert run.rc == 2 and said in run.err, run.err
    bulk = await served.reach("replay", "--filter", "capability=x.write", "--filter",
                              "since=0")
    assert bulk.rc == 0, bulk.err
    assert bulk.out.splitlines() == ["replaying 1 dead letter(s)", f"  {task_id}"]

    phrases, phrases_json, forget = await asyncio.gather(
        served.reach("phrases"), served.reach("phrases", "--json", "--capability", "x.write"),
        served.reach("phrases", "--forget", "Never Taught"))
    assert phrases.rc == 0 and "none learned" in phrases.out
    assert phrases_json.json() == {"phrases": []}
    assert forget.rc == 1 and "nothing learned for 'Never Taught'" in forget.out


async def test_cancel_a_live_task_from_a_shell(served: Served) -> None:
    held, agent = Held(), Agent("slow", reconnect_base=0.02)
    agent.capability("x.slow", latency_ms=20_000)(held.run)
    await agent.connect(served.url)
    try:
        async with Client.connect(served.url, caller="planner") as client:
            handle = await client.submit("x.slow", {})
            run = await served.reach("cancel", handle.task_id, "--reason", "wrong day", "--json")
            assert run.rc == 0, run.err
            view = run.json()
            assert view["state"] == "cancelled"
            assert view["error"]["message"] == "cancelled by admin: wrong day"
            with pytest.raises(Cancelled):
                await handle.result(timeout=5)
            await asyncio.wait_for(held.stopped.wait(), 5)
            plain = await served.reach("cancel", handle.task_id)  # ended: as it ended
            assert (plain.rc, plain.out.strip()) == (0, f"{handle.task_id}: cancelled")
        missing = await served.reach("cancel", "f" * 32)
        assert missing.rc == 4 and "no task" in missing.err  # invalid_params
    finally:
        await agent.close(drain=0.1)


async def test_submit_from_a_shell_prints_the_task_and_can_wait(served: Served) -> None:
    served.broken["on"] = False
    handed = await served.reach("submit", "x.write", '{"n": 2}', "--key", "nightly-7",
                                "--json", token=None)
    assert handed.rc == 0, handed.err
    first = handed.json()
    assert set(first) == {"task_id", "trace_id", "duplicate"} and first["duplicate"] is False
    again = await served.reach("submit", "x.write", '{"n": 2}', "--key", "nightly-7",
                               token=None)
    assert again.rc == 0 and again.out.startswith(first["task_id"]), again.out
    assert "a duplicate" in again.out
    found = await served.reach("find", first["task_id"], "--json")
    assert found.rc == 0 and first["task_id"] in found.out

    waited = await served.reach("submit", "x.write", '{"n": 5}', "--wait", "10", token=None)
    assert waited.rc == 0 and json.loads(waited.out) == 50, waited.err
    chained = await served.reach("submit", "x.write", '{"n": 5}', "--then",
                                 '{"capability": "x.write", "map": {"n": ""}}', "--wait", "10",
                                 token=None)  # the chain's outcome: its last step's
    assert chained.rc == 0 and json.loads(chained.out) == 500, chained.err

    bad_hook = await served.reach("submit", "x.write", "{}", "--notify", "ftp://x/y",
                                  token=None)
    assert bad_hook.rc == 4 and "notify must be an http(s) URL" in bad_hook.err
    bad_step = await served.reach("submit", "x.write", "{}", "--then", "{nope", token=None)
    assert bad_step.rc == 2 and "--then" in bad_step.err
