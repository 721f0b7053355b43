"""Settling dead letters (issue 29, item 2): a letter that can never succeed is discarded with
a reason (kept whole, audited, out of the default list, also after a restart), and one that
could with other params or more time is replayed with them (checked against the schema; the
history says what changed and who changed it). Through ``Reach``, the store's rows and the
audit log; the admin feed and the shell are in tests/test_admin_client.py and
tests/test_admin_cli.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reach import Context, InvalidParams, TaskFailed
from reach.testing import Cluster

PARAMS = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 100}},
          "required": ["n"]}


async def _writer(cluster: Cluster, broken: dict[str, bool]) -> None:
    async def write(n: int) -> int:
        if broken["on"]:
            raise RuntimeError("bad deploy")
        return n * 10

    await cluster.add_agent("writer", {"x.write": write}, params=PARAMS)


async def _letter(cluster: Cluster, n: int = 1) -> str:
    client = await cluster.client()
    with pytest.raises(TaskFailed):
        await client.call("x.write", {"n": n})
    [letter] = [d for d in cluster.reach.dead_letters() if d["envelope"]["params"] == {"n": n}]
    return str(letter["task_id"])


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_discarded_letter_is_kept_audited_and_out_of_the_list_across_a_restart(
        tmp_path: Path) -> None:
    store, audit = f"sqlite:///{tmp_path / 'reach.db'}", tmp_path / "audit.log"
    cluster = await Cluster.start(store=store, max_retries=0, audit_log=str(audit))
    try:
        await _writer(cluster, {"on": True})
        task_id = await _letter(cluster)
        with pytest.raises(InvalidParams, match="needs a reason"):
            await cluster.reach.discard(task_id, reason="  ")
        with pytest.raises(InvalidParams, match="not an unresolved dead letter"):
            await cluster.reach.discard("no-such-task", reason="x")
        view = await cluster.reach.discard(task_id, reason="order 42 was cancelled")
        assert view["discarded"]["reason"] == "order 42 was cancelled"
        assert view["discarded"]["by"] == "python"
        assert cluster.reach.dead_letters() == []
        [kept] = cluster.reach.dead_letters(discarded=True)
        assert kept["task_id"] == task_id and kept["state"] == "dead"
        assert kept["envelope"]["params"] == {"n": 1}  # kept whole
        with pytest.raises(InvalidParams, match="discarded already"):  # once is enough
            await cluster.reach.discard(task_id, reason="again")
    finally:
        await cluster.close()
    lines = [a for a in _audit(audit) if a.get("action") == "discard"]
    assert len(lines) == 1 and lines[0]["args"]["task_id"] == task_id, lines

    again = await Cluster.start(store=store, max_retries=0)
    try:
        assert again.reach.dead_letters() == []  # still settled after the restart
        assert [d["task_id"] for d in again.reach.dead_letters(discarded=True)] == [task_id]
        row = await again.reach.task(task_id)
        assert row is not None and row["state"] == "dead"
        assert any(h["note"] == "discarded by python: order 42 was cancelled"
                   for h in row["history"])
    finally:
        await again.close()


async def test_a_replay_with_new_params_and_timeout_runs_them_and_says_who_changed_what(
        tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    broken = {"on": True}
    cluster = await Cluster.start(store=store, max_retries=0)
    try:
        await _writer(cluster, broken)
        task_id = await _letter(cluster, n=3)
        broken["on"] = False
        # Refused against the schema, and the letter is untouched: listed, its params kept.
        with pytest.raises(InvalidParams, match="smaller than or equal to 100"):
            await cluster.reach.replay(task_id, params={"n": 1000})
        with pytest.raises(InvalidParams, match="timeout"):
            await cluster.reach.replay(task_id, timeout=-1)
        [letter] = cluster.reach.dead_letters()
        assert letter["task_id"] == task_id and letter["envelope"]["params"] == {"n": 3}

        view = await cluster.reach.replay(task_id, params={"n": 7}, timeout=5)
        assert view["state"] == "succeeded" and view["result"] == 70
        assert view["params"] == {"n": 7} and view["timeout"] == 5.0
        notes = [h["note"] for h in view["history"]]
        assert "replayed by python with new params and timeout 5 s" in notes
        assert cluster.reach.dead_letters() == []
    finally:
        await cluster.close()
    again = await Cluster.start(store=store)
    try:  # the row holds what ran
        row = await again.reach.task(task_id)
        assert row is not None and row["params"] == {"n": 7} and row["timeout"] == 5.0
    finally:
        await again.close()


async def test_a_discarded_letter_can_still_be_replayed_by_id() -> None:
    broken = {"on": True}
    cluster = await Cluster.start(max_retries=0)
    try:
        await _writer(cluster, broken)
        task_id = await _letter(cluster)
        await cluster.reach.discard(task_id, reason="looked broken")
        broken["on"] = False
        view = await cluster.reach.replay(task_id)
        assert view["state"] == "succeeded"
        assert cluster.reach.dead_letters(discarded=True) == []
    finally:
        await cluster.close()


async def test_new_params_reach_an_agent_still_running_the_old_ones_under_a_new_key() -> None:
    """The letter the issue names: its params always time out. The agent is still running
    the old run when the operator replays with new params; under the same key its SDK would
    join that run (and time out again), so a replay with new params travels as ``<key>~1``."""
    import asyncio

    release = asyncio.Event()
    seen: list[str] = []

    async def slow(n: int, ctx: Context) -> int:
        seen.append(ctx.idempotency_key)
        if n == 0:
            await release.wait()  # never, within the test
        return n

    cluster = await Cluster.start(max_retries=0)
    try:
        await cluster.add_agent("slowpoke", {"x.slow": slow}, latency_ms=50)
        client = await cluster.client()
        with pytest.raises(Exception):  # noqa: B017 - timeout or task_failed: it dead-letters
            await client.call("x.slow", {"n": 0}, timeout=0.2)
        [letter] = cluster.reach.dead_letters()
        view = await cluster.reach.replay(letter["task_id"], params={"n": 4}, timeout=5)
        assert view["state"] == "succeeded" and view["result"] == 4
        assert len(seen) == 2 and seen[1] == seen[0] + "~1"
    finally:
        release.set()
        await cluster.close()
