"""A chain whose next step was never created (its head ended while the coordinator stopped)
is carried on by the next coordinator on the same SQLite file (reach.gateway.chaining.resume),
and the pure rules of reach.core.chains: pointers, params, keys, notes, views."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from reach import Agent, Client, Reach
from reach.core import chains
from reach.core.chains import Link, Step
from reach.testing import wait_until

FAST = {"heartbeat_interval": 0.05, "recovery_grace": 0.5}


async def test_a_head_that_ends_during_a_stop_has_its_next_step_started_on_restart(
        tmp_path: Path) -> None:
    db = tmp_path / "reach.db"
    first = await Reach.start(store=f"sqlite:///{db}", drain_timeout=2.0, **FAST)
    port = int(first.url.rsplit(":", 1)[1])
    entered, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []
    agent = Agent("holder", reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("hold.run", params={"type": "object"}, idempotent=True)
    async def hold(n: int) -> dict[str, Any]:
        runs.append("hold.run")
        entered.set()
        await release.wait()
        return {"n": n + 1}

    @agent.capability("next.run", params={"type": "object"}, idempotent=True)
    async def after(n: int) -> dict[str, Any]:
        runs.append("next.run")
        return {"n": n * 10}

    await agent.connect(first.url)
    client = await Client.connect(first.url, caller="planner", reconnect_for=10)
    second = None
    try:
        handle = await client.submit("hold.run", {"n": 1}, idempotency_key="r1",
                                     then="next.run")
        await asyncio.wait_for(entered.wait(), 5)
        stopping = asyncio.create_task(first.stop())
        await wait_until(lambda: not first.gateway.accepting, timeout=5, interval=0.001)
        release.set()  # the head succeeds while the coordinator drains: no next step now
        await stopping
        with contextlib.closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT idempotency_key, state, history FROM reach_tasks"
                                ).fetchall()
        assert [(k, s) for k, s, _ in rows] == [("planner/r1", "succeeded")]
        assert chains.NEXT not in rows[0][2]

        second = await Reach.start(store=f"sqlite:///{db}", port=port, **FAST)
        assert await handle.result(timeout=5) == {"n": 20}
        assert runs == ["hold.run", "next.run"]
        head = await client.status(handle.task_id)
        step = await client.status(head["chain"]["next"])
        assert step["idempotency_key"] == "r1#2" and step["parent_task_id"] == handle.task_id
        # A third start finds nothing to carry on: the note is stored with the head.
        await second.stop()
        second = await Reach.start(store=f"sqlite:///{db}", port=port, **FAST)
        assert await second.gateway.chains.resume(0.0) == 0
        assert runs == ["hold.run", "next.run"]
    finally:
        await client.close()
        await agent.close()
        if second is not None:
            await second.stop()


async def test_a_finished_chain_answers_with_its_last_result_after_a_restart(
        tmp_path: Path) -> None:
    """A caller asking a chain's head for its outcome after the coordinator restarted gets
    the last step's result: the steps are read back from the store (none is live)."""
    db = tmp_path / "reach.db"
    agent = Agent("doubler", reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("twice.run", params={"type": "object"}, idempotent=True)
    async def twice(n: int) -> dict[str, int]:
        return {"n": n * 2}

    first = await Reach.start(store=f"sqlite:///{db}", **FAST)
    await agent.connect(first.url)
    async with Client.connect(first.url, caller="planner") as client:
        handle = await client.submit("twice.run", {"n": 3}, then=["twice.run", "twice.run"])
        assert await handle.result(timeout=5) == {"n": 24}
    await agent.close()
    await first.stop()
    second = await Reach.start(store=f"sqlite:///{db}", **FAST)
    try:
        async with Client.connect(second.url, caller="planner") as client:
            assert await client.result(handle.task_id, timeout=5) == {"n": 24}
    finally:
        await second.stop()


# ---------------------------------------------------------------- the pure rules

DOC = {"a": {"b/c": [10, {"d~e": True}]}, "": "empty key", "list": []}


@pytest.mark.parametrize(("pointer", "value"), [
    ("", DOC), ("/a/b~1c/0", 10), ("/a/b~1c/1/d~0e", True), ("/", "empty key"),
    ("/list", []),
])
def test_a_pointer_reads_what_rfc_6901_says(pointer: str, value: Any) -> None:
    assert chains.resolve(DOC, pointer) == value


@pytest.mark.parametrize(("pointer", "why"), [
    ("/missing", "has no 'missing'"), ("/a/b~1c/2", "not an index of a 2-item array"),
    ("/a/b~1c/01", "not an index"), ("/a/b~1c/-", "not an index"),
    ("/a/b~1c/0/x", "steps into a number"), ("/list/0", "0-item array"),
    ("/a/b~1c/\u00b2", "not an index"),
])
def test_a_pointer_that_names_nothing_says_why(pointer: str, why: str) -> None:
    with pytest.raises(chains.Unmapped, match=why):
        chains.resolve(DOC, pointer)


def test_params_come_from_an_object_result_or_a_map() -> None:
    assert chains.params_for(Step("x.y"), {"k": 1}) == {"k": 1}
    for result, kind in [([1], "an array"), ("s", "a string"), (None, "null"),
                         (True, "a boolean"), (2.5, "a number")]:
        with pytest.raises(chains.Unmapped, match=f"is {kind}, not a JSON object"):
            chains.params_for(Step("x.y"), result)
    assert chains.params_for(Step("x.y", {"v": "", "w": "/0"}), [7]) == {"v": [7], "w": 7}


def test_steps_are_checked_with_their_pointers() -> None:
    assert chains.steps_of(None) == () == chains.steps_of([])
    assert chains.steps_of("Report.Build") == (Step("report.build"),)
    assert chains.steps_of([{"capability": "a.b", "map": {"p": "/x~0~1"}}]) == (
        Step("a.b", {"p": "/x~0~1"}),)
    for bad in ([{"capability": "a.b", "map": {"p": "/x~"}}],
                [{"capability": "a.b", "map": {"p": "/x~2"}}],
                [{"capability": "a.b", "map": {"p": "x"}}],
                [{"capability": "a.b", "map": {}}], 5, [None]):
        with pytest.raises(ValueError, match="then"):
            chains.steps_of(bad)


def test_keys_places_and_names() -> None:
    assert chains.step_key("k#1", 2) == "k#1#2"
    assert chains.chain_key("k#1#2", Link("h", 2, 3)) == "k#1"  # a caller's key keeps its '#'
    assert chains.chain_key("k#1", None) == "k#1"
    assert chains.place("h", (Step("a.b"),), None) == Link("h", 1, 2)
    assert chains.named("boom", Link("h", 2, 3), "a.b") == "step 2 of 3 (a.b): boom"
    assert chains.named("step 2 of 3 (a.b): boom", Link("h", 2, 3), "a.b") == \
        "step 2 of 3 (a.b): boom"


def test_a_view_says_where_the_chain_went() -> None:
    then = (Step("a.b"),)
    assert chains.view_of("h", then, None, []) == {"head": "h", "step": 1, "of": 2}
    history = [("succeeded", 1.0, ""), ("succeeded", 1.0, chains.NEXT + "t2")]
    assert chains.view_of("h", then, None, history)["next"] == "t2"
    stopped = [("succeeded", 1.0, chains.STOPPED + "invalid_params: step 2 of 2 (a.b): no")]
    assert chains.view_of("h", then, None, stopped)["stopped"] == {
        "code": "invalid_params", "message": "step 2 of 2 (a.b): no"}
    assert chains.view_of("t2", (), Link("h", 2, 2), history) == json.loads(
        '{"head": "h", "step": 2, "of": 2}')
