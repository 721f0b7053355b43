"""``from reach import Admin`` (issue 29, item 1): a coordinator operated from another process's
point of view, over its admin feed — agents, dead letters, replay, discard, drain — against a
real coordinator on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach import Admin, InvalidParams, TaskFailed, Unauthorized, Unavailable
from reach.testing import Cluster

TOKEN = "adm1n-s3cret"


@pytest.fixture
async def cluster() -> Any:
    c = await Cluster.start(admin_token=TOKEN, max_retries=0)
    yield c
    await c.close()


async def _until(admin: Admin, predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await admin.changed(0.5)


async def _dead_letter(cluster: Cluster, broken: dict[str, bool]) -> None:
    async def write(n: int) -> int:
        if broken["on"]:
            raise RuntimeError("bad deploy")
        return n

    await cluster.add_agent("writer", {"x.write": write})
    client = await cluster.client()
    with pytest.raises(TaskFailed):
        await client.call("x.write", {"n": 1})


async def test_agents_dead_letters_replay_and_drain(cluster: Cluster) -> None:
    broken = {"on": True}
    await _dead_letter(cluster, broken)
    async with Admin.connect(cluster.url, token=TOKEN) as admin:
        assert [a["name"] for a in await admin.agents()] == ["writer"]
        letters = await admin.dead_letters()
        assert [d["capability"] for d in letters] == ["x.write"]
        assert await admin.dead_letters(capability="other") == []
        assert len(await admin.dead_letters(error="BAD DEPLOY")) == 1
        assert letters == cluster.reach.dead_letters()  # the same objects as in-process

        task_id = letters[0]["task_id"]
        assert (await admin.replay(task_id))["state"] == "dead"  # still broken
        broken["on"] = False
        view = await admin.replay(task_id)
        assert view["state"] == "succeeded"

        async def gone() -> bool:
            return await admin.dead_letters() == []
        await _until(admin, gone)

        drained = await admin.drain("writer")
        assert drained["draining"]

        async def draining() -> bool:
            return bool((await admin.agents())[0]["draining"])
        await _until(admin, draining)
        assert not (await admin.undrain("writer"))["draining"]

        found = await admin.find(task_id)
        assert found["task_id"] == task_id
        assert (await admin.trace(found["trace_id"]))["trace_id"] == found["trace_id"]


async def test_refusals_are_reach_errors_with_their_codes(cluster: Cluster) -> None:
    with pytest.raises(Unauthorized) as info:
        await Admin.connect(cluster.url, token="wrong")
    assert info.value.code == "unauthorized"

    admin = await Admin.connect(cluster.url, token=TOKEN)
    try:
        with pytest.raises(InvalidParams) as bad:
            await admin.replay("no-such-task")
        assert bad.value.code == "invalid_params"
        with pytest.raises(InvalidParams):
            await admin.drain("nobody")
    finally:
        await admin.close()
    with pytest.raises(Unavailable):
        await admin.agents()  # closed


async def test_nobody_listening_is_unavailable() -> None:
    from subprocs import free_port

    with pytest.raises(Unavailable) as info:
        await Admin.connect(f"ws://127.0.0.1:{free_port()}", token=TOKEN, open_timeout=1.0)
    assert info.value.code == "unavailable"


async def test_discard_and_replay_with_new_params_and_timeout(cluster: Cluster) -> None:
    """Needs the coordinator's settling actions (issue 29 item 2, branch i29-settle)."""
    broken = {"on": True}
    await _dead_letter(cluster, broken)
    async with Admin.connect(cluster.url, token=TOKEN) as admin:
        [letter] = await admin.dead_letters()
        broken["on"] = False
        view = await admin.replay(letter["task_id"], params={"n": 7}, timeout=5.0)
        assert view["state"] == "succeeded" and view.get("result") == 7

    broken["on"] = True
    client = await cluster.client()
    with pytest.raises(TaskFailed):
        await client.call("x.write", {"n": 2})
    async with Admin.connect(cluster.url, token=TOKEN) as admin:
        async def one() -> bool:
            return len(await admin.dead_letters()) == 1
        await _until(admin, one)
        [letter] = await admin.dead_letters()
        settled = await admin.discard(letter["task_id"], reason="never valid")
        assert settled["task_id"] == letter["task_id"]

        async def hidden() -> bool:
            return await admin.dead_letters() == []
        await _until(admin, hidden)
        kept = await admin.dead_letters(discarded=True)
        assert [d["task_id"] for d in kept] == [letter["task_id"]]
