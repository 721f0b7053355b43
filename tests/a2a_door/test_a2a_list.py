"""A2A ListTasks through the official client: a caller's own tasks however many newer tasks
other callers have, each once across pages, filtered by status time, shaped as asked; and
the index it reads by is made only when the A2A door is on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a_door.conftest import FAST, a2a_client, call, send, serve
from sqlalchemy import inspect

from reach import Agent, Reach
from reach.core.tasks import Envelope, new_task
from reach.store.connect import make_engine
from reach.store.listing import CALLER_INDEX

TOKENS = {"tok-a": "alice", "tok-b": "bob", "tok-w": "worker"}
OTHERS = 12_000  # more than the newest 10,000 of the store the door once looked among


async def crowd(reach: Reach, n: int) -> None:
    """``n`` tasks of a hundred other callers, newer than any so far, stored in bulk."""
    now = time.time()
    tasks = [new_task(Envelope(task_id=f"crowd-{i:05d}", trace_id=f"crowd-{i}",
                               capability="echo.run", params={}, caller=f"crowd-{i % 100}",
                               idempotency_key=f"crowd-{i}", created_at=now + i * 1e-6),
                      now + i * 1e-6) for i in range(n)]
    for i in range(0, n, 1_000):
        await asyncio.gather(*(reach.store.insert(t) for t in tasks[i:i + 1_000]))


def indexes(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {str(i["name"]) for i in inspect(engine).get_indexes("reach_tasks")}
    finally:
        engine.dispose()


async def test_a_caller_lists_all_its_tasks_behind_many_newer_ones_of_others(
        tmp_path: Path) -> None:
    async with Reach.start(**FAST, a2a=True, tokens=TOKENS,
                           store=f"sqlite:///{tmp_path / 'reach.db'}") as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url, "tok-a") as alice, \
                    a2a_client(reach.a2a_url, "tok-b") as bob:
                mine = []
                for i in range(2):
                    [event] = await send(alice, call("math.add", {"a": i, "b": 1}))
                    mine.append(event.task)
                between = time.time()
                [event] = await send(alice, call("math.add", {"a": 2, "b": 1}))
                mine.append(event.task)
                [theirs] = await send(bob, call("echo.run", {}))
                await crowd(reach, OTHERS)

                first = await alice.list_tasks(pb.ListTasksRequest(page_size=2))
                assert first.total_size == 3 and first.next_page_token
                rest = await alice.list_tasks(pb.ListTasksRequest(
                    page_size=2, page_token=first.next_page_token))
                assert not rest.next_page_token
                assert [t.id for t in [*first.tasks, *rest.tasks]] == \
                    [t.id for t in reversed(mine)]  # newest first, each once

                seen = await bob.list_tasks(pb.ListTasksRequest())
                assert [t.id for t in seen.tasks] == [theirs.task.id] and seen.total_size == 1
                # alice's cursor in bob's hands pages through bob's tasks, never hers
                past = await bob.list_tasks(pb.ListTasksRequest(
                    page_token=first.next_page_token))
                assert not {t.id for t in past.tasks} & {t.id for t in mine}

                after = pb.ListTasksRequest()
                after.status_timestamp_after.FromNanoseconds(int(between * 1e9))
                late = await alice.list_tasks(after)
                assert [t.id for t in late.tasks] == [mine[2].id] and late.total_size == 1
                assert late.tasks[0].status.timestamp.ToNanoseconds() >= int(between * 1e9)
                after.status_timestamp_after.FromNanoseconds(0)
                assert (await alice.list_tasks(after)).total_size == 3
        finally:
            await agent.close(drain=0.2)


async def test_history_length_include_artifacts_and_page_size_as_the_sdk_reads_them() -> None:
    async with Reach.start(**FAST, a2a=True, tokens=TOKENS) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url, "tok-a") as alice:
                await send(alice, call("math.add", {"a": 1, "b": 1}))
                [plain] = (await alice.list_tasks(pb.ListTasksRequest())).tasks
                assert len(plain.history) == 1 and not plain.artifacts  # artifacts: asked for
                [full] = (await alice.list_tasks(pb.ListTasksRequest(
                    include_artifacts=True, history_length=0))).tasks
                assert not full.history and [a.name for a in full.artifacts] == ["result"]
                for wrong in (pb.ListTasksRequest(page_size=0),
                              pb.ListTasksRequest(page_size=101),
                              pb.ListTasksRequest(history_length=-1)):
                    with pytest.raises(InvalidParamsError):
                        await alice.list_tasks(wrong)
        finally:
            await agent.close(drain=0.2)


async def test_the_index_listing_reads_is_made_only_with_the_a2a_door(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reach.db'}"
    async with Reach.start(**FAST, store=url):
        pass
    assert CALLER_INDEX not in indexes(url)  # no A2A: no index, nothing more per insert
    async with Reach.start(**FAST, a2a=True, store=url):
        pass
    assert CALLER_INDEX in indexes(url)
