"""``Reach``'s lifecycle edges and operator surface over a real loopback coordinator: a start
that fails releases what it opened, re-entering a started coordinator is a no-op, a stored
declaration with a name no longer valid is skipped, and the operator calls (drain, undrain,
describe, traces, replay with a wait that runs out, admin commands, detach of an unknown
agent) do what they say."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conformance.rawpeer import agent, answer, caller, submit

from reach import InvalidParams, Reach
from reach.adapters import Adapter

JOB = {"name": "job.run"}


def taken_port() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


async def test_a_start_on_a_taken_port_fails_and_closes_the_store(tmp_path: Path) -> None:
    holder = taken_port()
    try:
        opening = Reach.start(port=holder.getsockname()[1], http_port=None,
                              store=f"sqlite:///{tmp_path / 'r.db'}")
        reach = opening._target  # type: ignore[attr-defined]
        with pytest.raises(OSError):
            await opening
    finally:
        holder.close()
    assert not reach.started and reach._server is None
    # The store was closed: the same file opens again for a coordinator that starts.
    async with Reach.start(store=f"sqlite:///{tmp_path / 'r.db'}", http_port=None) as again:
        assert again.started


async def test_entering_a_started_coordinator_again_changes_nothing() -> None:
    reach = await Reach.start(http_port=None)
    try:
        port, started_at = reach.port, reach.started_at
        async with reach as same:  # __aenter__ on a started coordinator: no second start
            assert same is reach and same.port == port and same.started_at == started_at
            assert reach.describe()["url"] == reach.url
        assert not reach.started  # __aexit__ stopped it
    finally:
        await reach.stop()  # (stopping twice is a no-op)


async def test_a_stored_declaration_with_an_invalid_name_is_skipped(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    async with Reach.start(store=f"sqlite:///{db}", http_port=None,
                           heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "w", [JOB])
        await worker.close()
    with sqlite3.connect(db) as conn:  # as an older version might have stored it
        conn.execute("UPDATE reach_agents SET capabilities = ? WHERE name = 'w'",
                     (json.dumps([{"name": "job.run"}, {"name": ".."}, {}]),))
    async with Reach.start(store=f"sqlite:///{db}", http_port=None) as reach:
        assert reach.gateway.known == {"job.run": {"w"}}
        boss = await caller(reach.url)
        await boss.send(submit(1, "job.run", defer_ack=True))  # a call (a submit would wait)
        err = (await boss.expect("error", id=1))["error"]
        assert err["code"] == "unavailable" and "declared by ['w'], not connected now" \
            in err["message"]
        await boss.close()


async def test_drain_undrain_and_admin_commands_act_on_the_named_agent() -> None:
    async with Reach.start(http_port=None, heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "w", [JOB])
        drained = reach.drain("w")  # no new work: drained, its in-flight work finishes
        assert drained["draining"] is True and drained["state"] == "drained"
        boss = await caller(reach.url)
        await boss.send(submit(1, "job.run", defer_ack=True))  # a call (a submit would wait)
        assert (await boss.expect("error", id=1))["error"]["code"] == "unavailable"
        undrained = reach.undrain("w")
        assert undrained["draining"] is False and undrained["state"] == "online"
        by_command = await reach.admin_command("drain", {"agent": "w"})
        assert by_command["draining"] is True
        by_id = await reach.admin_command("undrain", {"agent": reach.identity("w")})
        assert by_id["draining"] is False and by_id["state"] == "online"
        await boss.close()
        with pytest.raises(InvalidParams, match="unknown admin action 'explode'"):
            await reach.admin_command("explode", {})
        with pytest.raises(InvalidParams, match="no agent named 'nobody'"):
            reach.drain("nobody")
        with pytest.raises(ValueError, match="no attached agent named 'w'; attached: none"):
            await reach.detach("w")  # connected over websocket, not attached
        await worker.close()


async def test_replay_with_a_wait_that_runs_out_returns_the_running_task() -> None:
    async with Reach.start(http_port=None, heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "w", [JOB])
        boss = await caller(reach.url)
        await boss.send(submit(1, "job.run", {}, timeout=0.05, max_retries=0))
        accepted = await boss.expect("accepted", id=1)
        tid = accepted["task_id"]
        assert (await boss.outcome(1))["error"]["code"] == "timeout"
        assert [d["task_id"] for d in reach.dead_letters()] == [tid]
        await worker.expect("invoke")  # the first attempt, never answered
        view = await reach.replay(tid, wait=0.01)
        assert view["task_id"] == tid and view["state"] not in ("succeeded", "failed", "dead")
        invoke = await worker.expect("invoke", task_id=tid)
        await answer(worker, invoke, "second time")
        async with asyncio.timeout(2):
            while (await reach.task(tid) or {}).get("state") != "succeeded":
                await asyncio.sleep(0.005)
        assert reach.dead_letters() == []  # resolved by the replay
        assert any(t["trace_id"] == accepted["trace_id"] for t in reach.traces())
        assert len(reach.traces(limit=1)) == 1
        await boss.close()
        await worker.close()


async def test_attach_before_start_is_refused_with_how_to() -> None:
    reach = Reach.start(http_port=None)._target  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="start the coordinator before attaching agents"):
        await reach.attach(object())


async def test_a_restart_lists_the_dead_letters_it_stored(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    async with Reach.start(store=db, http_port=None, heartbeat_interval=0.1) as reach:
        worker = await agent(reach.url, "w", [JOB])
        boss = await caller(reach.url)
        await boss.send(submit(1, "job.run", {}, timeout=0.05, max_retries=0))
        tid = (await boss.expect("accepted", id=1))["task_id"]
        assert (await boss.outcome(1))["error"]["code"] == "timeout"
        await boss.close()
        await worker.close()
    async with Reach.start(store=db, http_port=None) as again:
        [letter] = again.dead_letters()
        assert letter["task_id"] == tid and letter["capability"] == "job.run"
        assert again.dead_letter(tid) is not None


class Echo(Adapter):
    kind = "scripted"

    async def invoke(self, work: Any, how: dict[str, Any], reply: Any) -> Any:
        return {"echo": work.params}

    async def check(self) -> bool:
        return True


async def test_an_attached_agents_registration_warnings_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    async with Reach.start(http_port=None) as reach:
        with caplog.at_level(logging.WARNING, "reach"):
            view = await reach.attach(Echo("legacy", {"Echo.Run": {"idempotent": True}}))
        assert view["capabilities"] == ["echo.run"]
        assert "agent legacy: capability 'Echo.Run' registered as 'echo.run'" in \
            [r.getMessage() for r in caplog.records]
        boss = await caller(reach.url)
        await boss.send(submit(1, "Echo.Run", {"a": 1}))
        assert (await boss.outcome(1))["result"] == {"echo": {"a": 1}}
        await boss.close()
        await reach.detach("legacy", grace=0.1)
        assert reach.adapters == {} and reach.agents()[0]["draining"] is True
