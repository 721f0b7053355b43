"""The audit log (docs/security.md, "Audit log"): who called what, with which scope, what the
coordinator decided and how each task ended, one JSON line each, written off the loop.

Field: "an audit log of who called what with which scope (no params by default)".
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from reach import Agent, Client, InvalidParams, NoRoute, Reach, Unauthorized
from reach.server.audit import AuditWriter

TOKENS = {"tok-planner": "planner", "tok-intern": "intern", "tok-worker": "worker"}
PERMISSIONS = {"planner": ("*",), "intern": ("report.*",)}
SERVES = {"worker": ("*",)}
SECRET = "s3cr3t-value"
SALES = {"type": "object", "properties": {"region": {"type": "string"}},
         "required": ["region"]}


def lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each parsed on its own (the log is JSON lines)."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def shape(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without their times, with task and trace ids numbered by first sight."""
    ids: dict[str, str] = {}
    out = []
    for r in records:
        assert "time" not in r or r["time"].endswith("+00:00")
        r = {k: v for k, v in r.items() if k != "time"}
        for key in ("task_id", "trace_id"):
            if r.get(key) is not None:
                r[key] = ids.setdefault(r[key], f"{key[:-3]}{len(ids) + 1}")
        out.append(r)
    return out


async def start(path: Path, **options: Any) -> tuple[Reach, Agent]:
    reach = await Reach.start(heartbeat_interval=0.05, tokens=TOKENS, permissions=PERMISSIONS,
                              serves=SERVES, audit_log=str(path), **options)
    agent = Agent("worker", token="tok-worker", reconnect_base=0.02)

    @agent.capability("sales.query", params=SALES, idempotent=True)
    async def sales(region: str) -> dict[str, str]:
        return {"total": f"42 in {region}"}

    @agent.capability("report.make", scope="write")
    async def report(title: str) -> str:
        return f"report {title}"

    await agent.connect(reach.url)
    return reach, agent


async def admin_command(reach: Reach, action: str, args: dict[str, Any]) -> dict[str, Any]:
    async with websockets.connect(reach.url, max_size=None) as ws:
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": reach.admin_token}))
        assert json.loads(await ws.recv())["type"] == "snapshot"
        await ws.send(json.dumps({"v": 1, "type": "command", "id": 1, "action": action,
                                  "args": args}))
        async with asyncio.timeout(5):
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "reply":
                    return frame


async def test_the_audit_log_holds_each_decision_and_end_without_params(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    reach, agent = await start(path)
    try:
        planner = await Client.connect(reach.url, caller="planner", token="tok-planner")
        intern = await Client.connect(reach.url, caller="intern", token="tok-intern")
        assert await planner.call("sales.query", {"region": SECRET}, timeout=5) == {
            "total": f"42 in {SECRET}"}
        await planner.call("sales.query", {"region": "east"}, idempotency_key="k1", timeout=5)
        await planner.call("sales.query", {"region": "east"}, idempotency_key="k1", timeout=5)
        with pytest.raises(Unauthorized):
            await intern.call("sales.query", {"region": SECRET}, timeout=5)
        assert await intern.call("report.make", {"title": SECRET}, timeout=5) == \
            f"report {SECRET}"
        with pytest.raises(NoRoute):
            await planner.call("sales.qurey", {"region": SECRET}, timeout=5)
        with pytest.raises(InvalidParams):
            await planner.call("sales.query", {"region": 7, "note": SECRET}, timeout=5)
        async with httpx.AsyncClient(base_url=reach.http_url or "", timeout=5) as http:
            r = await http.post("/v1/call/sales.query", json={"region": SECRET},
                                headers={"Authorization": "Bearer tok-intern"})
            assert r.status_code == 403, r.text
        reply = await admin_command(reach, "drain", {"agent": "worker"})
        assert reply["ok"] is True
        await planner.close()
        await intern.close()
    finally:
        await agent.close(drain=1.0)
        await reach.stop()  # writes what is queued, then closes the file

    text = path.read_text(encoding="utf-8")
    assert SECRET not in text  # neither params nor results, nor a message quoting them
    got = shape(lines(path))
    call = {"event": "call", "trace_id": None, "task_id": None}
    sales_call = {**call, "caller": "planner", "capability": "sales.query", "scope": "read"}
    assert got == [
        {**sales_call, "task_id": "task1", "trace_id": "trace2", "decision": "accepted"},
        {"event": "end", "caller": "planner", "capability": "sales.query", "task_id": "task1",
         "trace_id": "trace2", "state": "succeeded", "agent": "worker", "attempts": 1},
        {**sales_call, "task_id": "task3", "trace_id": "trace4", "decision": "accepted"},
        {"event": "end", "caller": "planner", "capability": "sales.query", "task_id": "task3",
         "trace_id": "trace4", "state": "succeeded", "agent": "worker", "attempts": 1},
        {**sales_call, "task_id": "task3", "trace_id": "trace4", "decision": "duplicate"},
        {**sales_call, "caller": "intern", "decision": "unauthorized"},
        {**call, "caller": "intern", "capability": "report.make", "scope": "write",
         "task_id": "task5", "trace_id": "trace6", "decision": "accepted"},
        {"event": "end", "caller": "intern", "capability": "report.make", "task_id": "task5",
         "trace_id": "trace6", "state": "succeeded", "agent": "worker", "attempts": 1},
        {**call, "caller": "planner", "capability": "sales.qurey", "scope": None,
         "decision": "no_route"},
        {**sales_call, "decision": "invalid_params"},
        {**sales_call, "caller": "intern", "decision": "unauthorized"},  # over REST
        {"event": "admin", "principal": "admin", "action": "drain",
         "args": {"agent": "worker"}, "ok": True},
    ]


async def test_with_audit_params_the_params_are_recorded_and_results_are_not(
        tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    reach, agent = await start(path, audit_params=True)
    try:
        async with Client.connect(reach.url, caller="planner", token="tok-planner") as planner:
            await planner.call("sales.query", {"region": SECRET}, timeout=5)
            with pytest.raises(InvalidParams):
                await planner.call("sales.query", {"region": 7}, timeout=5)
    finally:
        await agent.close(drain=1.0)
        await reach.stop()
    got = lines(path)
    assert [r["event"] for r in got] == ["call", "end", "call"]
    assert got[0]["params"] == {"region": SECRET} and got[0]["decision"] == "accepted"
    assert got[2]["params"] == {"region": 7} and got[2]["decision"] == "invalid_params"
    assert "params" not in got[1] and "result" not in got[1]
    assert f"42 in {SECRET}" not in path.read_text(encoding="utf-8")  # the result never


async def test_tags_and_intent_calls_are_recorded_as_such(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    reach = await Reach.start(heartbeat_interval=0.05, audit_log=str(path))
    try:
        async with Client.connect(reach.url, caller="c") as client:
            with pytest.raises(NoRoute):
                await client.call_intent("do something nobody offers", timeout=5)
            with pytest.raises(NoRoute):
                await client.call("geo.lookup", tags={"region": "eu"}, timeout=5)
    finally:
        await reach.stop()
    got = shape(lines(path))
    assert got == [
        {"event": "call", "caller": "c", "capability": "", "scope": None, "task_id": None,
         "trace_id": None, "decision": "no_route", "by_intent": True},
        {"event": "call", "caller": "c", "capability": "geo.lookup", "scope": None,
         "task_id": None, "trace_id": None, "decision": "no_route",
         "tags": {"region": "eu"}},
    ]


async def test_a_path_that_cannot_be_opened_fails_the_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await Reach.start(audit_log=str(tmp_path / "no" / "such" / "dir" / "audit.jsonl"))


async def test_a_full_queue_drops_and_the_log_says_how_many(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = AuditWriter(str(path), maxsize=2)
    for n in range(5):  # the thread is not running yet: two fit, three are dropped
        writer.put({"event": "call", "n": n})
    assert writer.dropped == 3
    await writer.start()
    await writer.stop()
    # the gap is reported as soon as the thread sees it: after the record it was writing
    assert lines(path) == [{"event": "call", "n": 0},
                           {"event": "audit_dropped", "dropped": 3, "total_dropped": 3},
                           {"event": "call", "n": 1}]
    assert writer.written == 3
    await writer.stop()  # a second stop does nothing


async def test_a_rotated_file_is_reopened_at_its_path(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    writer = AuditWriter(str(path))
    await writer.start()
    try:
        writer.put({"n": 1})
        await wait_written(writer, 1)
        os.rename(path, tmp_path / "audit.jsonl.1")  # what logrotate does
        writer.put({"n": 2})
        await wait_written(writer, 2)
    finally:
        await writer.stop()
    assert lines(tmp_path / "audit.jsonl.1") == [{"n": 1}]
    assert lines(path) == [{"n": 2}]


async def wait_written(writer: AuditWriter, n: int) -> None:
    async with asyncio.timeout(5):
        while writer.written < n:
            await asyncio.sleep(0.005)


async def test_dash_writes_to_the_reach_audit_logger_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = AuditWriter("-")
    with caplog.at_level(logging.INFO, logger="reach.audit"):
        await writer.start()
        writer.put({"event": "call", "caller": "c"})
        writer.put({"event": "call", "params": float("nan")})  # not JSON: said, not fatal
        await writer.stop()
    found = [json.loads(r.getMessage()) for r in caplog.records if r.name == "reach.audit"]
    assert found[0] == {"event": "call", "caller": "c"}
    assert found[1]["params"].startswith("<not encodable")
    assert list(tmp_path.iterdir()) == []  # no file named "-"


async def test_a_task_whose_commit_fails_is_recorded_as_not_stored() -> None:
    """On a gateway with fake ports (tests/gateway/test_decisions.py's rig): the decision was
    logged as accepted, so its end says the store refused it (it was never acknowledged)."""
    from test_decisions import Rig

    from reach.core.tasks import SubmitRequest
    from reach.gateway.audit import Audit

    rig = Rig()
    records: list[dict[str, Any]] = []
    rig.gateway.audit = Audit(rig.clock, records.append, rig.registry)
    rig.agent("a", lambda work: "ok")
    rig.store.fail_next = True
    with pytest.raises(OSError):
        await rig.gateway.submit(SubmitRequest("x.work", {}, "tester"))
    await rig.clock.settle()
    assert [(r["event"], r.get("decision"), r.get("state")) for r in records] == [
        ("call", "accepted", None), ("end", None, "not_stored")]
    assert records[0]["time"] == rig.clock.wall()  # the writer prints it in ISO 8601


def test_reach_serve_takes_audit_log_and_audit_params() -> None:
    from reach.cli import _parser, _settings

    def settings(*argv: str) -> Any:
        return _settings(_parser().parse_args(["serve", *argv]))
    s = settings("--audit-log", "/var/log/reach/audit.jsonl", "--audit-params")
    assert (s.audit_log, s.audit_params) == ("/var/log/reach/audit.jsonl", True)
    assert (settings().audit_log, settings().audit_params) == (None, False)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
async def test_a_full_disk_loses_lines_counted_and_logged_and_keeps_the_writer(
        caplog: pytest.LogCaptureFixture) -> None:
    writer = AuditWriter("/dev/full")  # every write fails with ENOSPC
    await writer.start()
    with caplog.at_level(logging.ERROR, logger="reach"):
        writer.put({"event": "call", "n": 1})
        async with asyncio.timeout(5):
            while writer.lost < 1:
                await asyncio.sleep(0.005)
        writer.put({"event": "call", "n": 2})  # the thread is still there
        async with asyncio.timeout(5):
            while writer.lost < 2:
                await asyncio.sleep(0.005)
        await writer.stop()
    assert writer.written == 0 and writer.lost == 2
    assert any("line(s) not written" in r.getMessage() for r in caplog.records)


def test_audit_records_intent_text_only_when_asked_and_ends_with_the_error_code() -> None:
    from reach.core.liveness import LivenessPolicy
    from reach.core.registry import Registry
    from reach.core.tasks import Envelope, SubmitRequest, TaskState, new_task
    from reach.gateway.audit import Audit
    from reach.testing import ManualClock

    records: list[dict[str, Any]] = []
    registry = Registry(LivenessPolicy(interval=10.0))
    quiet = Audit(ManualClock(), records.append, registry)
    loud = Audit(ManualClock(), records.append, registry, include_params=True)
    by_intent = SubmitRequest("", {"q": 1}, "c", intent="查一下库存")
    quiet.refused(by_intent, NoRoute("none"))
    loud.refused(by_intent, NoRoute("none"))
    assert records[0]["by_intent"] is True and "intent" not in records[0]
    assert "params" not in records[0]
    assert records[1]["intent"] == "查一下库存" and records[1]["params"] == {"q": 1}
    # a name the gateway cannot normalize is recorded as given
    quiet.refused(SubmitRequest("...", {}, "c"), InvalidParams("no words"))
    assert records[2]["capability"] == "..." and records[2]["decision"] == "invalid_params"
    task = new_task(Envelope("t1", "r1", "x.work", {}, "c", "k"), 0.0)
    task.state, task.error = TaskState.DEAD, {"code": "timeout", "message": "late"}
    quiet.ended(task)
    assert records[3] == {"time": records[3]["time"], "event": "end", "caller": "c",
                          "capability": "x.work", "task_id": "t1", "trace_id": "r1",
                          "state": "dead", "agent": None, "attempts": 0, "error": "timeout"}
