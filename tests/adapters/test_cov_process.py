"""ProcessAgent on its edges, with real processes: commands that end in particular ways (killed
by a signal, printing nothing, leaving a child behind that holds stdout, removed after being
declared), stdio processes that answer oddly (an error as plain text, a reply with neither
result nor error, a last reply with no newline, a reply to someone else's id), a request larger
than the pipe, and the supervisor's bookkeeping when a call is given up on in the very turn
its reply or its failure arrives."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reach.adapters import AdapterAnswer, AdapterFault, ProcessAgent, process_stdio
from reach.adapters.process_args import Template, context_env, context_fields
from reach.adapters.process_stdio import Supervisor
from reach.core.backoff import Backoff
from reach.ports import Work
from reach.testing import wait_until

from .test_cov_base import Recorded
from .test_process import gone

W3C_TRACE = "b" * 32
TASK = "a" * 32

# A JSON-lines process for the stdio tests; argv[1] says how it behaves.
STDIO = r'''
import json, sys, time
mode = sys.argv[1]
if mode == "deaf":  # never reads its input; exits soon
    time.sleep(0.1)
    sys.exit(0)
for line in sys.stdin:
    msg = json.loads(line)
    rid = msg["id"]
    if msg.get("cancel"):
        continue
    if mode == "last-words":  # the reply without its newline, then the end
        sys.stdout.write(json.dumps({"id": rid, "result": "last"}))
        sys.stdout.flush()
        sys.exit(0)
    op = msg.get("params", {}).get("op", "ping")
    if op == "hang":
        continue
    if op == "noisy-crash":
        sys.stderr.write("noise " * 1000 + "\nthe real reason\n")
        sys.stderr.flush()
        sys.exit(4)
    if op == "string-error":
        reply = {"id": rid, "error": "plain words"}
    elif op == "neither":
        reply = {"id": rid, "status": "done"}
    elif op == "stranger":  # a reply to an id nobody waits for, then the real one
        print(json.dumps({"id": 10 ** 6, "result": "not yours"}))
        reply = {"id": rid, "result": "yours"}
    elif op == "ping":  # a chunk for a call that does not stream, then the reply
        print(json.dumps({"id": rid, "chunk": "ignored"}))
        reply = {"id": rid, "result": "pong"}
    else:
        reply = {"id": rid, "result": msg["params"]}
    print(json.dumps(reply), flush=True)
'''


def work(capability: str, params: dict[str, Any] | None = None, attempt: int = 1,
         **kw: Any) -> Work:
    return Work(TASK, attempt, capability, params or {}, "c/k", W3C_TRACE, "c", **kw)


def per_call(argv: list[str], caps: dict[str, Any], **kw: Any) -> ProcessAgent:
    return ProcessAgent("cmd", argv, caps, kill_grace=0.1, **kw)


def stdio(mode: str, **kw: Any) -> ProcessAgent:
    return ProcessAgent("worker", [sys.executable, "-c", STDIO, mode], {"tool.run": {}},
                        mode="stdio", kill_grace=0.1, restart_delay=0.02, **kw)


def supervisor(mode: str) -> Supervisor:
    return Supervisor("worker", sys.executable, ["-c", STDIO, mode], env=dict(os.environ),
                      cwd=None, max_line=1 << 20, grace=0.1, backoff=Backoff(base=0.02))


async def call(agent: ProcessAgent, w: Work) -> tuple[str, Any]:
    reply = Recorded()
    assert agent.deliver(w, reply)
    await asyncio.wait_for(reply.resolved.wait(), 5)
    assert reply.outcome is not None
    return reply.outcome


# ---------------------------------------------------------------- per call: how it ends


async def test_a_child_left_holding_stdout_does_not_hold_the_call(tmp_path: Path) -> None:
    """The command printed its result and exited, but a child it started in the background
    keeps stdout open: after the grace the group is ended and the result is what it printed."""
    pidfile = tmp_path / "pid"
    agent = per_call(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; echo '{{\"ok\": 1}}'"],
                     {"tool.run": {"input": "none"}})
    result = await asyncio.wait_for(agent.invoke(work("tool.run"), {}, Recorded()), 3)
    assert result == {"ok": 1}
    await wait_until(lambda: gone(int(pidfile.read_text())), timeout=2)


@pytest.mark.parametrize("number,name", [(9, "SIGKILL"), (35, "signal 35")])
async def test_a_command_killed_by_a_signal_is_a_fault_naming_it(number: int, name: str) -> None:
    agent = per_call([sys.executable, "-c", f"import os; os.kill(os.getpid(), {number})"],
                     {"tool.run": {"input": "none"}})
    with pytest.raises(AdapterFault, match=f"was killed by {name}; stderr") as err:
        await agent.invoke(work("tool.run"), {}, Recorded())
    assert err.value.details == {"exit_code": -number}


async def test_a_command_that_prints_nothing_is_a_fault_saying_what_it_should_print() -> None:
    agent = per_call(["sh", "-c", "cat > /dev/null"], {"tool.run": {}})
    with pytest.raises(AdapterFault, match="printed nothing on stdout; it should print its "
                                           "result as JSON"):
        await agent.invoke(work("tool.run", {"a": 1}), {}, Recorded())


async def test_a_capabilitys_answer_codes_replace_the_agents() -> None:
    script = "echo \"no such region: $1\" >&2; exit $2"
    agent = per_call(["sh", "-c", script, "sh"], {
        "geo.lookup": {"args": ["{region}", "{code}"], "answer_codes": [3], "input": "none"}},
        answer_codes=[2])
    with pytest.raises(AdapterAnswer, match="^no such region: mars$") as answered:
        await agent.invoke(work("geo.lookup", {"region": "mars", "code": 3}), {}, Recorded())
    assert answered.value.details == {"exit_code": 3}
    with pytest.raises(AdapterFault, match="exited with code 2"):  # not this capability's
        await agent.invoke(work("geo.lookup", {"region": "mars", "code": 2}), {}, Recorded())


async def test_a_nul_byte_in_a_param_is_an_answer_and_runs_nothing(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    agent = per_call(["sh", "-c", f"touch {ran}; echo '{{}}'", "sh"],
                     {"tool.run": {"args": ["--name={name}"], "input": "none"}})
    kind, error = await call(agent, work("tool.run", {"name": "a\x00b"}))
    assert kind == "error" and error["details"]["answer"] is True
    assert "contains a NUL byte" in error["message"] and not ran.exists()


async def test_a_program_removed_after_it_was_declared_is_undelivered(tmp_path: Path) -> None:
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho '{}'\n")
    script.chmod(0o755)
    agent = per_call([str(script)], {"tool.run": {}})
    script.unlink()
    kind, why = await call(agent, work("tool.run"))
    assert kind == "undelivered" and why.startswith(f"could not start {str(script)!r}: ")


def test_more_declaration_mistakes_are_named() -> None:
    sh = ["sh", "-c", "cat"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"argv": []}, "argv must be a non-empty list of strings"),
        ({"argv": ["", "x"]}, "argv holds an empty program name or a NUL byte"),
        ({"argv": ["sh", "a\x00b"]}, "argv holds an empty program name or a NUL byte"),
        ({"env": ["A=1"]}, "env must be a table of NAME"),
        ({"env": {"A=B": "1"}}, "env name 'A=B' is not a variable name"),
        ({"capabilities": {"a.b": {"input": "yaml"}}}, "input must be one of"),
    ]
    for change, message in cases:
        kw: dict[str, Any] = {"argv": sh, "capabilities": {"a.b": {}}, **change}
        with pytest.raises(ValueError, match=message):
            ProcessAgent("x", **kw)


def test_the_call_context_without_a_w3c_trace_and_with_a_parent() -> None:
    w = Work(TASK, 2, "tool.run", {"p": 1}, "c/k", "my-own-trace", "planner",
             parent_task_id="p" * 32)
    env = context_env(w, "tool.run")
    assert "TRACEPARENT" not in env and env["REACH_TRACE_ID"] == "my-own-trace"
    assert env["REACH_PARENT_TASK_ID"] == "p" * 32 and "REACH_DEADLINE_MS" not in env
    line = context_fields(w, "tool.run")
    assert "traceparent" not in line and line["parent_task_id"] == "p" * 32
    assert line["attempt"] == 2 and line["params"] == {"p": 1}
    # Literal text alone is given as it is, whatever the params hold.
    assert Template("--verbose").fill({"verbose": "ignored"}) == "--verbose"


# ---------------------------------------------------------------- stdio: odd replies


async def test_stdio_replies_that_are_no_proper_reply_are_faults() -> None:
    agent = stdio("odd")
    await agent.open()
    try:
        kind, error = await call(agent, work("tool.run", {"op": "string-error"}))
        assert kind == "error" and error["message"] == "plain words"
        assert "answer" not in error["details"]
        kind, error = await call(agent, work("tool.run", {"op": "neither"}))
        assert kind == "error" and error["message"].startswith(
            "the process of 'worker' replied without \"result\" or \"error\": {\"id\": ")
        assert agent._stdio is not None and agent._stdio.garbage == 0
    finally:
        await agent.close()


async def test_a_reply_to_an_id_nobody_waits_for_is_dropped_quietly() -> None:
    agent = stdio("odd")
    await agent.open()
    try:
        assert await call(agent, work("tool.run", {"op": "stranger"})) == ("ok", "yours")
        assert agent._stdio is not None and agent._stdio.garbage == 0  # not a stray line
    finally:
        await agent.close()


async def test_a_chunk_for_a_call_that_does_not_stream_is_ignored() -> None:
    agent = stdio("odd", ping=True)
    await agent.open()
    try:
        assert await agent.check()  # the ping's chunk line is skipped, its reply counts
    finally:
        await agent.close()


async def test_a_last_reply_without_its_newline_still_answers_its_call() -> None:
    agent = stdio("last-words")
    await agent.open()
    try:
        assert await call(agent, work("tool.run", {"op": "echo"})) == ("ok", "last")
        await wait_until(lambda: agent.restarts == 1)  # it ended: started again
    finally:
        await agent.close()


async def _big_then_small(agent: ProcessAgent) -> list[tuple[str, Any]]:
    """A request over the drain threshold, then one more once it has been handed to the pipe
    (the second waits for the pipe to drain before waiting for its reply)."""
    big, small = Recorded(), Recorded()
    agent.deliver(work("tool.run", {"op": "echo", "blob": "x" * (
        2 * process_stdio.DRAIN_ABOVE)}), big)
    sup = agent._stdio
    assert sup is not None and sup._writer is not None
    transport = sup._writer.transport
    await wait_until(lambda: transport.get_write_buffer_size() > process_stdio.DRAIN_ABOVE)
    agent.deliver(work("tool.run", {"op": "echo", "n": 1}, attempt=2), small)
    await asyncio.wait_for(asyncio.gather(big.resolved.wait(), small.resolved.wait()), 5)
    return [r.outcome for r in (big, small) if r.outcome is not None]


async def test_requests_larger_than_the_pipe_are_written_in_full() -> None:
    agent = stdio("odd")
    await agent.open()
    try:
        (big, big_result), small = await _big_then_small(agent)
        assert big == "ok" and len(big_result["blob"]) == 2 * process_stdio.DRAIN_ABOVE
        assert small == ("ok", {"op": "echo", "n": 1})
    finally:
        await agent.close()


async def test_requests_to_a_process_that_never_reads_fail_with_the_reason() -> None:
    agent = stdio("deaf")
    await agent.open()
    try:
        outcomes = await _big_then_small(agent)
        assert [kind for kind, _ in outcomes] == ["error", "error"]
        assert all("ended its output, exit code 0" in e["message"] for _, e in outcomes)
    finally:
        await agent.close()


async def test_a_stdio_crash_reports_the_tail_of_a_long_stderr() -> None:
    agent = stdio("odd")
    await agent.open()
    try:
        kind, error = await call(agent, work("tool.run", {"op": "noisy-crash"}))
        assert kind == "error" and "exit code 4" in error["message"]
        assert error["message"].rstrip().endswith("the real reason; it is restarted")
        assert len(error["message"]) < 2048 + 200  # the tail, not all 6 KiB
    finally:
        await agent.close()


async def test_a_stdio_program_that_cannot_start_is_undelivered_saying_why(
        tmp_path: Path) -> None:
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    agent = ProcessAgent("worker", [str(script)], {"tool.run": {}}, mode="stdio",
                         restart_delay=10.0)
    script.unlink()
    await agent.open()  # tried once: not running, restarting after its delay
    try:
        assert not await agent.check() and agent.pid is None
        kind, why = await call(agent, work("tool.run"))
        assert kind == "undelivered" and "could not start" in why
    finally:
        await agent.close()  # nothing runs: stopping only ends the supervisor
    assert agent.restarts == 0


async def test_stopping_a_supervisor_never_started_is_harmless() -> None:
    sup = supervisor("odd")
    await sup.stop()
    assert not sup.running and sup.proc is None


# ---------------------------------------------------------------- stdio: same-turn races


async def _in_flight(sup: Supervisor, request: dict[str, Any]
                     ) -> tuple[asyncio.Task[dict[str, Any]], asyncio.Future[dict[str, Any]]]:
    task = asyncio.ensure_future(sup.call(request))
    await wait_until(lambda: bool(sup._calls))
    (pending,) = sup._calls.values()
    return task, pending.future


async def test_a_call_failed_in_the_turn_it_is_given_up_on_leaves_no_unread_error(
        caplog: pytest.LogCaptureFixture) -> None:
    sup = supervisor("odd")
    await sup.start()
    try:
        task, future = await _in_flight(sup, {"params": {"op": "hang"}})
        sup._fail_all("the process ended")  # what the reader does when the process dies …
        task.cancel()  # … in the same turn as the gateway gives the call up
        with pytest.raises(asyncio.CancelledError):
            await task
        assert isinstance(future.exception(), AdapterFault)
        del task, future
        gc.collect()
        assert "exception was never retrieved" not in caplog.text
    finally:
        await sup.stop()


async def test_a_reply_or_a_failure_for_a_call_just_given_up_on_is_dropped() -> None:
    sup = supervisor("odd")
    await sup.start()
    try:
        task, future = await _in_flight(sup, {"params": {"op": "hang"}})
        task.cancel()  # its future is cancelled at once; the call's own cleanup runs later
        rid = next(iter(sup._calls))
        sup._line(b'{"id": %d, "result": "late"}\n' % rid)  # the reader, in the same turn
        with pytest.raises(asyncio.CancelledError):
            await task
        assert future.cancelled() and sup._calls == {}
        task, future = await _in_flight(sup, {"params": {"op": "hang"}})
        task.cancel()
        sup._fail_all("the process ended")  # a failure in that turn: nothing to fail
        with pytest.raises(asyncio.CancelledError):
            await task
        assert future.cancelled()
        assert await sup.call({"params": {"op": "echo", "n": 1}}) == {
            "id": 3, "result": {"op": "echo", "n": 1}}  # the reader went on
    finally:
        await sup.stop()


async def test_a_line_queued_as_the_process_is_stopped_is_not_written() -> None:
    sup = supervisor("odd")
    await sup.start()
    task = asyncio.ensure_future(sup.call({"params": {"op": "echo"}}))
    await asyncio.sleep(0)  # the call queued its line; the write is due next turn
    assert sup._out
    await sup.stop()  # closes stdin first: the queued write finds it closing
    with pytest.raises(AdapterFault, match="ended its output|the agent was closed"):
        await task
    assert sup._out == []


def test_stray_lines_are_warned_about_once_per_period_with_the_count_in_between(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monkeypatch.setattr(process_stdio, "time", SimpleNamespace(monotonic=lambda: now[0]))
    caplog.set_level(logging.WARNING, "reach.adapters.process")
    sup = supervisor("odd")
    for at in (0.0, 1.0, 2.0, process_stdio.GARBAGE_LOG_EVERY + 0.5):
        now[0] = 1000.0 + at
        sup._stray(b"banner %d" % int(at))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and sup.garbage == 4
    assert "(2 more since the last warning)" in warned[1] and "banner 10" in warned[1]
