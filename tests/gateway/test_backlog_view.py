"""The backlog's bookkeeping (reach.gateway.backlog) through the gateway: what enters and
leaves it, and what it says of a capability's waiting tasks."""

from __future__ import annotations

from test_decisions import Rig

from reach.core.tasks import TaskState

S = TaskState


async def test_depth_oldest_and_view_follow_the_tasks_that_wait() -> None:
    rig = Rig()
    try:
        backlog = rig.gateway.book.backlog
        assert backlog.depth("x.work") == 0 and backlog.oldest("x.work", 0.0) == 0.0
        assert backlog.view(rig.clock.wall()) == {}
        _, link = rig.agent("a", None, max_concurrency=1)
        first = await rig.submit()
        older = await rig.submit()
        await rig.clock.advance(2.0)
        await rig.submit()
        assert backlog.depth("x.work") == 2
        assert backlog.oldest("x.work", rig.clock.wall()) == 2.0  # the first to wait
        assert backlog.view(rig.clock.wall()) == {"x.work": (2, 2.0)}
        link.finish(first.task_id, "ok", 1)
        await rig.clock.settle()
        assert older.state is S.RUNNING and backlog.depth("x.work") == 1
        assert backlog.oldest("x.work", rig.clock.wall()) == 0.0  # the newer one, just now
    finally:
        await rig.close()


async def test_a_waiting_task_let_go_to_another_node_leaves_the_backlog() -> None:
    rig = Rig()
    try:
        rig.agent("a", None, max_concurrency=1)
        await rig.submit()
        waiting = await rig.submit()
        assert rig.gateway.book.backlog.depth("x.work") == 1
        assert rig.gateway.following.let_go([waiting.task_id]) == 1
        assert rig.gateway.book.backlog.tasks == {}
        rig.gateway.book.backlog.leave(waiting)  # again: nothing left to take out
        assert rig.gateway.book.backlog.tasks == {}
    finally:
        await rig.close()
