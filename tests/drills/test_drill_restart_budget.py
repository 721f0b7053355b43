"""Drill: a coordinator restart changes nothing of a task's budget (issue 25, item 14).

Field: a task with ``max_retries`` 2 ended with 4 attempts across a coordinator restart; its
first attempt timed out after 3.01 s (its capability's latency history), the ones after the
restart after 0.36 s (the declared latency alone: the history went with the old process).
A resumed task keeps its attempt count, its deadline (measured from its submit) and its
completion timeout. Here, in milliseconds: an agent that never answers one kind of work, a
coordinator on a SQLite file stopped while the task runs and started again on the file and
port; the agent reconnects by itself.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST
from subprocs import free_port

from reach import Agent, Client, Reach

pytestmark = pytest.mark.timeout(60)

OK_S = 0.12      # how long the "ok" work takes: its P95 × 1.5 is the completion timeout, 0.18 s
DECLARED_MS = 20  # the declared latency: 24 ms is what a coordinator without history gives


def hanging_agent() -> Agent:
    agent = Agent("slowpoke", heartbeat_interval=0.05, reconnect_base=0.02)

    @agent.capability("work.read", idempotent=True, latency_ms=DECLARED_MS)
    async def read(mode: str, n: int = 0) -> dict[str, Any]:
        if mode == "hang":
            await asyncio.Event().wait()  # never answers
        await asyncio.sleep(OK_S)
        return {"n": n}

    return agent


class Rig:
    """A coordinator on one store (a SQLite file, or PostgreSQL) and port, restartable; the
    agent; a caller."""

    def __init__(self, url: str) -> None:
        self.url, self.port = url, free_port()
        self.reach: Reach | None = None
        self.agent = hanging_agent()

    async def start(self) -> Reach:
        self.reach = await Reach.start(store=self.url, port=self.port,
                                       http_port=None, drain_timeout=0.02, **FAST)
        return self.reach

    async def stop(self) -> None:
        if self.reach is not None:
            await self.reach.stop()
            self.reach = None

    async def client(self) -> Client:
        return await Client.connect(f"ws://127.0.0.1:{self.port}", caller="drill")

    async def ended(self, task_id: str, limit: float = 15.0) -> dict[str, Any]:
        """The task's status once it is terminal."""
        client = await self.client()
        try:
            view: dict[str, Any] = {}

            async def check() -> bool:
                view.update(await client.status(task_id))
                return view["state"] in ("succeeded", "failed", "dead")
            async with asyncio.timeout(limit):
                while not await check():
                    await asyncio.sleep(0.01)
            return view
        finally:
            await client.close()


async def open_rig(url: str) -> Rig:
    rig = Rig(url)
    await rig.start()
    await rig.agent.connect(f"ws://127.0.0.1:{rig.port}")
    return rig


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = await open_rig(f"sqlite:///{tmp_path / 'reach.db'}")
    try:
        yield rig
    finally:
        await rig.agent.close(drain=0.01)  # its hung handler is cancelled
        await rig.stop()


async def warm(client: Client) -> None:
    """The capability's latency history: P95 0.12 s, so its completion timeout is 0.18 s."""
    for n in range(5):
        assert await client.call("work.read", {"mode": "ok", "n": n}, timeout=10) == {"n": n}


async def attempts_seen(rig: Rig, task_id: str, n: int) -> None:
    client = await rig.client()
    try:
        async with asyncio.timeout(10):
            while len((await client.status(task_id))["attempts"]) < n:
                await asyncio.sleep(0.002)
    finally:
        await client.close()


def stored_attempts(url: str, task_id: str) -> list[dict[str, Any]]:
    """The attempts column of the task's row, as stored."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            (attempts,) = conn.execute("SELECT attempts FROM reach_tasks WHERE task_id = ?",
                                       (task_id,)).fetchone()
    else:
        import psycopg

        with psycopg.connect(url) as pg:
            row = pg.execute("SELECT attempts FROM reach_tasks WHERE task_id = %s",
                             (task_id,)).fetchone()
            assert row is not None
            (attempts,) = row
    found: list[dict[str, Any]] = json.loads(attempts)
    return found


async def test_a_restart_keeps_the_attempt_count_and_the_completion_timeout(
        store_url: str) -> None:
    rig = await open_rig(store_url)
    try:
        await restart_mid_way(rig)
    finally:
        await rig.agent.close(drain=0.01)
        await rig.stop()


async def restart_mid_way(rig: Rig) -> None:
    client = await rig.client()
    try:
        await warm(client)
        handle = await client.submit("work.read", {"mode": "hang"}, max_retries=2)
    finally:
        await client.close()
    await attempts_seen(rig, handle.task_id, 2)  # attempt 1 timed out, attempt 2 is running
    await rig.stop()
    on_disk = stored_attempts(rig.url, handle.task_id)  # the timeout is in the row itself
    assert [a["number"] for a in on_disk] == [1, 2]
    assert all(a.get("timeout") is not None for a in on_disk), on_disk
    await rig.start()

    view = await rig.ended(handle.task_id)
    attempts = view["attempts"]
    summary = [(a["number"], a["outcome"], a["duration_ms"], a.get("timeout"))
               for a in attempts]
    assert view["state"] == "dead", summary
    # max_retries 2: three attempts in all, the one the restart interrupted among them
    assert len(attempts) == 3, summary
    assert [a["outcome"] for a in attempts] == ["timeout", "lost", "timeout"], summary
    first = attempts[0]
    assert first["timeout"] == pytest.approx(OK_S * 1.5, rel=0.5)  # from the history
    for attempt in attempts[1:]:
        assert attempt["timeout"] == first["timeout"], summary  # kept, not 0.024 s
    # the attempt after the restart ran its whole kept timeout (24 ms without the fix)
    assert attempts[2]["duration_ms"] >= first["timeout"] * 1000 * 0.9, summary
    notes = [h["note"] for h in view["history"]]
    assert "resumed" in notes
    assert sum(h["state"] == "retrying" for h in view["history"]) == 2, notes


async def test_a_restart_keeps_the_deadline_from_the_submit(rig: Rig) -> None:
    timeout = 1.0
    client = await rig.client()
    try:
        handle = await client.submit("work.read", {"mode": "hang"}, timeout=timeout,
                                     max_retries=2)
    finally:
        await client.close()
    await attempts_seen(rig, handle.task_id, 1)
    await asyncio.sleep(0.4)  # 0.4 s of the caller's second spent before the stop
    await rig.stop()
    await asyncio.sleep(0.3)  # and the coordinator down for 0.3 s
    await rig.start()

    view = await rig.ended(handle.task_id)
    ended_at = view["history"][-1]["at"]
    took = ended_at - view["created_at"]
    assert view["state"] == "dead", view["history"]
    assert "did not complete within" in view["error"]["message"]
    # Ends about a second after the submit, not a second after the restart (≥ 1.7 s).
    assert timeout - 0.05 <= took < timeout + 0.45, (took, view["history"])
    assert len(view["attempts"]) <= 3


async def test_a_task_interrupted_in_its_last_allowed_attempt_is_not_sent_again(
        rig: Rig) -> None:
    client = await rig.client()
    try:
        await warm(client)
        handle = await client.submit("work.read", {"mode": "hang"}, max_retries=0)
    finally:
        await client.close()
    await attempts_seen(rig, handle.task_id, 1)
    await rig.stop()
    await rig.start()

    view = await rig.ended(handle.task_id)
    assert view["state"] == "dead"
    assert [a["outcome"] for a in view["attempts"]] == ["lost"]  # 1 + max_retries 0
    assert "restarted during attempt 1" in view["error"]["message"]
    assert "replay" in view["error"]["message"]
