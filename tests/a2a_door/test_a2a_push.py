"""A2A push notifications, sent by Reach's own sender: the token header, retries with
backoff, dead letters and their replay, the SSRF check, and the config methods."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a_door.conftest import FAST, a2a_client, accepted, call, send, slow, worked
from aiohttp import web

from reach import Reach


class Receiver:
    """A loopback HTTP receiver that answers ``fail`` first (each a status), then 200."""

    def __init__(self, fail: list[int]) -> None:
        self.fail = fail
        self.got: list[tuple[dict[str, str], Any]] = []
        self.tries = 0
        self.arrived = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.tries += 1
        if self.fail:
            return web.Response(status=self.fail.pop(0))
        self.got.append((dict(request.headers), await request.json()))
        self.arrived.set()
        return web.Response(status=204)


@asynccontextmanager
async def receiving(fail: list[int]) -> AsyncIterator[Receiver]:
    receiver = Receiver(fail)
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


def pushed(request: pb.SendMessageRequest, url: str, token: str) -> pb.SendMessageRequest:
    config = request.configuration.task_push_notification_config
    config.url, config.token = url, token
    return request


async def test_a_finished_task_is_pushed_with_its_token_through_a_retry() -> None:
    async with Reach.start(**FAST, a2a=True, a2a_push_private=True) as reach, \
            receiving([503]) as receiver:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, pushed(call("math.add", {"a": 1, "b": 2}),
                                                receiver.url, "tok-123"))
            await asyncio.wait_for(receiver.arrived.wait(), 5)
    assert receiver.tries == 2  # a 503, retried
    [(headers, body)] = receiver.got
    assert headers["X-A2A-Notification-Token"] == "tok-123"
    assert body["task"]["id"] == event.task.id
    assert body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert body["task"]["artifacts"][0]["parts"][0]["data"] == {"sum": 3.0}


async def test_an_undelivered_push_is_a_dead_letter_that_replays() -> None:
    async with Reach.start(**FAST, a2a=True, a2a_push_private=True) as reach, \
            receiving([404]) as receiver:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, call("echo.run", {}))
            config = await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=event.task.id, url=receiver.url))
            assert config.id and config.task_id == event.task.id
            pusher = reach.a2a.pusher
            await asyncio.wait_for(pusher.settled(), 5)
            assert receiver.tries == 1  # a 404 is not retried
            [dead] = pusher.dead
            assert dead.reason == "HTTP 404" and dead.task.task_id == event.task.id
            assert pusher.replay() == [event.task.id]
            await asyncio.wait_for(receiver.arrived.wait(), 5)
            assert not pusher.dead and pusher.delivered == 1


async def test_private_receivers_are_refused_unless_allowed() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            for url in ("http://127.0.0.1:9/hook", "http://10.0.0.1/hook",
                        "http://169.254.169.254/latest", "file:///etc/passwd"):
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, pushed(call("echo.run", {}), url, "t"))
                assert refused.value.data == {"code": "invalid_params"}
            [event] = await send(client, call("echo.run", {}))
            with pytest.raises(InvalidParamsError):
                await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=event.task.id,
                                                  url="http://localhost/hook"))


async def test_configs_are_kept_listed_and_deleted_per_task() -> None:
    async with Reach.start(**FAST, a2a=True, a2a_push_private=True) as reach:
        assert reach.a2a_url is not None
        go = asyncio.Event()
        agent = slow(go)
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url) as client:
                task_id = (await accepted(client, "slow.read")).id
                made = await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=task_id, id="c1",
                                                  url="http://127.0.0.1:9/hook"))
                assert made.id == "c1"
                got = await client.get_task_push_notification_config(
                    pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
                assert got.url == "http://127.0.0.1:9/hook"
                listed = await client.list_task_push_notification_configs(
                    pb.ListTaskPushNotificationConfigsRequest(task_id=task_id))
                assert [c.id for c in listed.configs] == ["c1"]
                await client.delete_task_push_notification_config(
                    pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
                assert not (await client.list_task_push_notification_configs(
                    pb.ListTaskPushNotificationConfigsRequest(task_id=task_id))).configs
                with pytest.raises(InvalidParamsError):
                    await client.get_task_push_notification_config(
                        pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
                with pytest.raises(TaskNotFoundError):
                    await client.create_task_push_notification_config(
                        pb.TaskPushNotificationConfig(task_id="no-such-task",
                                                      url="http://127.0.0.1:9/hook"))
                go.set()
                await asyncio.wait_for(reach.a2a.pusher.settled(), 5)
                assert not reach.a2a.pusher.dead  # deleted: nothing was sent
        finally:
            go.set()
            await agent.close(drain=0.2)
