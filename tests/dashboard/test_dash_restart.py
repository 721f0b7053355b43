"""Traces survive a restart, and any task or trace is found by id (issue 14, items 9 and 10).

A real SQLite file: calls run, the coordinator stops, a new one starts on the same file, and
the admin feed's trace list, the waterfall (``trace`` command, ``reach.trace``) and ``find``
answer from what the store kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import websockets

from reach import Context, Reach, ReachError
from reach.core.backoff import Backoff
from reach.testing import Cluster
from reach.wire import admin


async def feed_command(url: str, action: str, args: dict[str, Any]
                       ) -> tuple[admin.Snapshot, admin.Reply]:
    """The first snapshot of a fresh admin session, and the reply to one command on it."""
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": "t"}))
        snapshot = admin.parse_admin(await ws.recv())
        assert isinstance(snapshot, admin.Snapshot)
        await ws.send(json.dumps({"v": 1, "type": "command", "id": 1, "action": action,
                                  "args": args}))
        while True:
            frame = admin.parse_admin(await ws.recv())
            if isinstance(frame, admin.Reply):
                return snapshot, frame


async def run_calls(store: str) -> tuple[str, str, str]:
    """A nested call (report → sales) and a failing one on a fresh coordinator; returns the
    nested trace id, its root task id and the failing call's trace id."""
    cluster = await Cluster.start(store=store, admin_token="t",
                                  backoff=Backoff(base=0.005, jitter=0.0))
    try:
        async def sales() -> int:
            return 7

        async def report(ctx: Context) -> int:
            return int(await ctx.call("sales.query", {})) + 1

        async def broken() -> int:
            raise RuntimeError("disk on fire")

        await cluster.add_agent("sales-ledger-writer", {"sales.query": sales})
        await cluster.add_agent("reports", {"report.write": report, "ops.break": broken},
                                idempotent=True)
        client = await cluster.client("planner")
        handle = await client.submit("report.write", {})
        assert await handle.result(5) == 8
        bad = await client.submit("ops.break", {}, max_retries=1)
        with pytest.raises(ReachError):
            await bad.result(5)
        return handle.trace_id, handle.task_id, bad.trace_id
    finally:
        await cluster.close()


async def test_the_trace_list_and_waterfalls_survive_a_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    trace_id, root_task, failed_trace = await run_calls(store)

    reach = await Reach.start(store=store, admin_token="t")
    try:
        snapshot, reply = await feed_command(reach.url, "trace", {"trace_id": trace_id})
        listed = {t.trace_id: t for t in snapshot.traces}
        assert set(listed) == {trace_id, failed_trace}
        assert [t.trace_id for t in snapshot.traces] == [failed_trace, trace_id]  # newest first
        summary = listed[trace_id]
        assert (summary.root, summary.tasks, summary.state) == ("report.write", 2, "succeeded")
        assert listed[failed_trace].state == "dead"
        timeline = admin.Timeline.model_validate(reply.result)
        assert [t.capability for t in timeline.tasks] == ["report.write", "sales.query"]
        phases = {(h.capability, h.phase) for h in timeline.hops}
        assert {("report.write", "processing"), ("sales.query", "processing"),
                ("sales.query", "done")} <= phases
        assert {h.agent for h in timeline.hops if h.phase == "processing"} == {
            "reports", "sales-ledger-writer"}
        view = reach.trace(trace_id)  # the synchronous API answers too: it is in memory
        assert [e["capability"] for e in view][:1] == ["report.write"]
        assert len(view.hops) == len(timeline.hops)
        _, found = await feed_command(reach.url, "find", {"id": root_task[:8]})
        assert found.ok and found.result["trace_id"] == trace_id
        assert found.result["task_id"] == root_task
    finally:
        await reach.stop()


async def test_an_old_trace_is_read_from_the_store(tmp_path: Path) -> None:
    """Past ``recent_traces`` (here 1), a restart lists only the newest; the older one's
    waterfall and ``find`` still come from the store, as does ``reach.find_trace``."""
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    trace_id, root_task, failed_trace = await run_calls(store)
    reach = await Reach.start(store=store, admin_token="t", recent_traces=1)
    try:
        assert [t["trace_id"] for t in reach.traces()] == [failed_trace]
        assert list(reach.trace(trace_id)) == []  # memory does not hold it
        stored = await reach.find_trace(trace_id)
        assert {e["capability"] for e in stored} == {"report.write", "sales.query"}
        _, reply = await feed_command(reach.url, "trace", {"trace_id": trace_id})
        assert len(admin.Timeline.model_validate(reply.result).tasks) == 2
        found = await reach.find(trace_id[:12].upper())  # any case, a head of the id
        assert found["task_id"] is None and found["summary"]["root"] == "report.write"
        assert found["dead_letter"] is False
        by_task = await reach.find(root_task)
        assert by_task["trace_id"] == trace_id and len(by_task["timeline"]["hops"]) > 3
    finally:
        await reach.stop()


async def test_find_says_what_it_could_not_find(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    await run_calls(store)
    reach = await Reach.start(store=store, admin_token="t")
    try:
        _, short = await feed_command(reach.url, "find", {"id": "ab"})
        assert not short.ok and short.error is not None
        assert short.error.code == "invalid_params" and "at least 6" in short.error.message
        _, missing = await feed_command(reach.url, "find", {"id": "f" * 32})
        assert missing.error is not None and "no task or trace" in missing.error.message
        _, task = await feed_command(reach.url, "task", {"task_id": "nope-nope"})
        assert task.error is not None and task.error.code == "invalid_params"
    finally:
        await reach.stop()


class Matches:
    """A store whose id-head lookup answers what the test says (the rest is the real one)."""

    def __init__(self, store: Any, tasks: list[str], trace_ids: list[str]) -> None:
        self.store = store
        self.answer = (tasks, trace_ids)

    async def trace_tasks(self, trace_ids: list[str]) -> list[Any]:
        return list(await self.store.trace_tasks(trace_ids))

    async def recent_traces(self, limit: int, scan: int = 5_000) -> list[Any]:
        return list(await self.store.recent_traces(limit, scan))

    async def match(self, prefix: str, limit: int = 2) -> tuple[list[str], list[str]]:
        return self.answer


async def test_find_by_a_head_in_memory_and_what_is_ambiguous() -> None:
    cluster = await Cluster.start(admin_token="t")
    try:
        async def ok() -> int:
            return 1

        await cluster.add_agent("one", {"x.ok": ok})
        client = await cluster.client()
        first = await client.submit("x.ok", {})
        second = await client.submit("x.ok", {})
        await first.result(5)
        await second.result(5)
        reach = cluster.reach
        found = await reach.find(first.task_id[:7])  # memory only: no store lookup needed
        assert (found["task_id"], found["trace_id"]) == (first.task_id, first.trace_id)
        assert (await reach.find(first.trace_id))["task_id"] is None
        lookup = reach.ops.lookup
        real = lookup.store
        lookup.store = Matches(real, [first.task_id, second.task_id], [])
        with pytest.raises(ReachError, match="starts more than one id"):
            await reach.find("abcdef")
        lookup.store = Matches(real, [first.task_id], [second.trace_id])
        with pytest.raises(ReachError, match="a task id and a trace id of another trace"):
            await reach.find("abcdef")
        lookup.store = Matches(real, ["f" * 32], [])  # listed, but no such task
        with pytest.raises(ReachError, match="no task or trace id starts with 'abcdef'"):
            await reach.find("abcdef")
        lookup.store = None  # memory only: an old trace is not found, and nothing breaks
        assert await lookup.restore_traces() == 0
        assert list(await reach.find_trace("0" * 32)) == []
    finally:
        await cluster.close()


async def test_the_store_reads_for_traces_at_their_edges(tmp_path: Path) -> None:
    from reach.gateway.book import replay_note
    from reach.store.store import Store

    store = Store(f"sqlite:///{tmp_path / 'edges.db'}")
    await store.open()
    try:
        assert await store.recent_traces(0) == [] and await store.recent_traces(5) == []
        assert await store.trace_tasks([]) == []
        assert await store.match("abcdef") == ([], [])
    finally:
        await store.close()
    assert replay_note(None) == "replayed"  # a letter without an error: nothing to keep
    long = replay_note({"code": "task_failed", "message": "x" * 500})
    assert long.startswith("replayed; was task_failed: xxx") and len(long) == 300


async def test_restoring_a_task_twice_lists_it_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    trace_id, root_task, _ = await run_calls(store)
    reach = await Reach.start(store=store, admin_token="t")
    try:
        before = list(reach.gateway.traces[trace_id])
        assert await reach.ops.lookup.restore_traces() == 2  # again: nothing doubles
        assert reach.gateway.traces[trace_id] == before and root_task in before
        assert reach.trace_summary(trace_id)["tasks"] == 2
    finally:
        await reach.stop()
