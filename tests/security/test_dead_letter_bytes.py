"""Dead letters are kept in memory within a byte budget, not by count alone (issue 25, item 6).

3,000 letters of 0.9 MB params cost +2.6 GB of memory: ``dead_letters_max`` (10,000) bounded
their count only. ``dead_letter_bytes`` bounds their size as ``recent_bytes`` bounds the
recent tasks': past it the oldest letters leave memory and ``reach.dead_letters()``; their rows
stay in the store, where status reads them and ``replay(task_id)`` runs them.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from reach import Reach
from reach.testing import Cluster

BLOB = 100_000  # characters of params per letter
LETTERS = 30  # ~3 MB of params in all
BOUND = 600_000  # dead_letter_bytes: a handful of letters


def params_bytes(letters: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(d["envelope"]["params"])) for d in letters)


async def kill(cluster: Cluster, broken: dict[str, bool]) -> list[str]:
    """``LETTERS`` calls with big params to an agent that fails them all: dead letters."""
    async def write(blob: str) -> int:
        if broken["on"]:
            raise RuntimeError("bad deploy")
        return len(blob)

    await cluster.add_agent("writer", {"order.write": write})
    client = await cluster.client()
    ids = []
    for i in range(LETTERS):
        # (queue_wait=0: once the faults open the agent's breaker, a task does not wait in the
        # backlog for it to close; it is a dead letter at once, as this test needs)
        handle = await client.submit("order.write", {"blob": f"{i % 10}" * BLOB},
                                     queue_wait=0)
        with pytest.raises(Exception):  # noqa: B017 - each becomes a dead letter
            await handle.result(5)
        ids.append(handle.task_id)
    return ids


async def test_dead_letters_in_memory_stay_within_their_byte_bound() -> None:
    cluster = await Cluster.start(dead_letter_bytes=BOUND, recent_bytes=BOUND, max_retries=0)
    try:
        broken = {"on": True}
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            ids = await kill(cluster, broken)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        reach = cluster.reach
        listed = reach.dead_letters()
        # The newest letters that fit the bound are listed, in order; the older ones left.
        assert 2 <= len(listed) < LETTERS
        assert [d["task_id"] for d in listed] == ids[-len(listed):]
        assert params_bytes(listed) <= BOUND
        # What the process holds grew by the two bounds (letters, recent tasks) and some
        # bookkeeping, not by the ~3 MB (x2 as str and as JSON) of every letter's params.
        assert grown < 2 * BOUND + 1_000_000, grown
        # A letter that left memory is still in the store, whole: status reads it ...
        client = await cluster.client()
        first = await client.status(ids[0])
        assert first["state"] == "dead" and first["params"]["blob"] == "0" * BLOB
        assert reach.dead_letter(ids[0]) is None  # not listed ...
        assert (await reach.find(ids[0]))["dead_letter"] is True  # ... yet still one
        # ... and replay runs it by id, with its params.
        broken["on"] = False
        reach.reset_breaker("writer")  # thirty faults in a row opened it
        view = await reach.replay(ids[0], wait=5)
        assert view["state"] == "succeeded" and view["result"] == BLOB
    finally:
        await cluster.close()


async def test_a_restart_lists_only_the_letters_that_fit(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    cluster = await Cluster.start(store=store, max_retries=0)
    try:
        ids = await kill(cluster, {"on": True})
        assert len(cluster.reach.dead_letters()) == LETTERS  # the default bound holds them
    finally:
        await cluster.close()
    async with Reach.start(store=store, dead_letter_bytes=BOUND) as reach:
        listed = reach.dead_letters()
        assert 2 <= len(listed) < LETTERS and params_bytes(listed) <= BOUND
        assert [d["task_id"] for d in listed] == ids[-len(listed):]
        assert (await reach.task(ids[0]))["state"] == "dead"  # read from the store


def test_the_bound_is_a_positive_setting() -> None:
    from reach.config import Settings

    assert Settings().dead_letter_bytes == 32 << 20
    with pytest.raises(ValueError, match="dead_letter_bytes must be positive"):
        Settings(dead_letter_bytes=0)
