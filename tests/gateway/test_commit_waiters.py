"""Who waits on a task's first commit (the caller's acknowledgement, the first attempt's send)
is called back through ``Gateway.then``: in the order asked, once the insert is done, after
the gateway has dealt with a failed one, each apart from the others' failures."""

from __future__ import annotations

import asyncio
import logging

import pytest
from test_decisions import Rig, ok

from reach.core.tasks import SubmitRequest


def submit(rig: Rig) -> tuple[str, asyncio.Future[None]]:
    admission = rig.gateway.accept(SubmitRequest("x.work", {"n": 1}, "tester"), None)
    assert admission.task is not None and admission.commit is not None
    return admission.task.task_id, admission.commit


async def test_who_waits_on_a_commit_is_called_back_in_the_order_asked() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        task_id, commit = submit(rig)
        heard: list[tuple[str, bool]] = []
        for name in ("first", "second", "third"):
            rig.gateway.then(task_id, commit,
                             lambda c, name=name: heard.append((name, c.exception() is None)))
        assert heard == []  # not before the insert is done
        await rig.clock.settle()
        assert heard == [("first", True), ("second", True), ("third", True)]
        task = rig.gateway.find(task_id)
        assert task is not None and task.terminal  # and the task was carried out meanwhile
    finally:
        await rig.close()


async def test_a_callback_that_fails_leaves_the_others_theirs(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        task_id, commit = submit(rig)
        heard: list[str] = []

        def broken(c: asyncio.Future[None]) -> None:
            raise RuntimeError("a bug in one waiter")

        rig.gateway.then(task_id, commit, broken)
        rig.gateway.then(task_id, commit, lambda c: heard.append("after"))
        with caplog.at_level(logging.ERROR, logger="reach.gateway.book"):
            await rig.clock.settle()
        assert heard == ["after"]
        assert any("commit failed" in r.getMessage() and r.exc_info for r in caplog.records)
        task = rig.gateway.find(task_id)
        assert task is not None and task.terminal
    finally:
        await rig.close()


async def test_a_failed_insert_is_told_after_the_task_is_forgotten() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        rig.store.fail_next = True
        task_id, commit = submit(rig)
        seen: list[object] = []
        rig.gateway.then(task_id, commit,
                         lambda c: seen.append((c.exception(), rig.gateway.find(task_id))))
        await rig.clock.settle()
        assert len(seen) == 1
        error, found = seen[0]  # type: ignore[misc]
        assert isinstance(error, OSError) and found is None  # never stored, never accepted
        assert rig.gateway.in_flight == 0
    finally:
        await rig.close()


async def test_asking_after_the_commit_settled_still_calls_back() -> None:
    rig = Rig()
    try:
        rig.agent("a", ok)
        task_id, commit = submit(rig)
        await rig.clock.settle()
        heard: list[str] = []
        rig.gateway.then(task_id, commit, lambda c: heard.append("late"))
        await asyncio.sleep(0)
        assert heard == ["late"]
    finally:
        await rig.close()
