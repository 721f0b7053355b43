"""A2A push configs survive a coordinator restart (they are kept in the store before they
are acknowledged): a notification a stop cut short is sent by the next start, and a task that
was unfinished at the stop is pushed when it ends after the restart (on SQLite and on
PostgreSQL). Loopback receivers, millisecond backoffs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from a2a.types import a2a_pb2 as pb
from a2a_door.conftest import FAST, a2a_client, call, hanging, send, slow, worked
from a2a_door.test_a2a_push import receiving

from reach import Reach
from reach.core.backoff import Backoff

QUICK = Backoff(base=0.001, factor=1.0, cap=0.001, jitter=0.0)


async def test_a_push_cut_by_a_stop_is_sent_by_the_next_start(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    async with hanging() as hook, receiving([]) as receiver:
        async with Reach.start(**FAST, a2a=True, a2a_push_private=True, store=store) as reach:
            assert reach.a2a_url is not None and reach.a2a is not None
            reach.a2a.pusher.close_grace = 0.05
            async with worked(reach) as client:
                [event] = await send(client, call("echo.run", {}))
                await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=event.task.id, id="late",
                                                  url=hook.url))
                await asyncio.wait_for(hook.entered.wait(), 5)
                await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=event.task.id, id="ok",
                                                  url=receiver.url))
                await asyncio.wait_for(receiver.arrived.wait(), 5)
        assert len(receiver.got) == 1  # "ok" went; "late" was cut by the stop
        hook.release.set()
        async with Reach.start(**FAST, a2a=True, a2a_push_private=True, store=store) as again:
            assert again.a2a is not None
            again.a2a.pusher.backoff = QUICK
            await asyncio.wait_for(again.a2a.pusher.settled(), 5)
            assert again.a2a.pusher.delivered == 1  # "late", to the hook that answers now
        async with Reach.start(**FAST, a2a=True, a2a_push_private=True, store=store) as third:
            assert third.a2a is not None and not third.a2a.pusher.configs  # sent: gone


async def test_an_unfinished_task_is_pushed_when_it_ends_after_a_restart(store_url: str
                                                                        ) -> None:
    store = store_url  # a SQLite file, then PostgreSQL
    go = asyncio.Event()

    async with receiving([]) as receiver:
        async with Reach.start(**FAST, a2a=True, a2a_push_private=True, store=store) as reach:
            assert reach.a2a_url is not None
            agent = slow(go, idempotent=True)
            await agent.connect(reach.url)
            try:
                async with a2a_client(reach.a2a_url) as client:
                    request = call("slow.read", {})
                    request.configuration.return_immediately = True
                    request.configuration.task_push_notification_config.url = receiver.url
                    [event] = await send(client, request)
                    task_id = event.task.id
            finally:
                await agent.close(drain=0.05)
        assert not receiver.got
        async with Reach.start(**FAST, a2a=True, a2a_push_private=True, store=store) as again:
            assert again.a2a is not None
            assert list(again.a2a.pusher.configs) == [task_id]
            go.set()
            agent = slow(go, idempotent=True)
            await agent.connect(again.url)
            try:
                await asyncio.wait_for(receiver.arrived.wait(), 10)
            finally:
                await agent.close(drain=0.2)
        [(_, body)] = receiver.got
        assert body["task"]["id"] == task_id
        assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
