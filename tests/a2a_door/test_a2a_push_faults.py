"""A2A push deliveries when the receiver misbehaves, and the bounds on configs: a receiver that
keeps failing gets ``TRIES`` tries and then a dead letter that says why; one that is not
listening, the same; one that hangs is cut at a stop, not waited for; credentials ride in the
Authorization header; configs are bounded per task; a URL that is not http(s) is refused even
when private receivers are allowed. Millisecond backoffs, set on the door's pusher."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a_door.conftest import FAST, a2a_client, accepted, call, hanging, send, serve, slow
from a2a_door.test_a2a_push import receiving

from reach import Agent, Reach
from reach.core.backoff import Backoff
from reach.server.a2a_push import MAX_PER_TASK, TRIES

QUICK = Backoff(base=0.001, factor=1.0, cap=0.001, jitter=0.0)


@asynccontextmanager
async def door() -> AsyncIterator[Reach]:
    """A coordinator with the A2A door (private receivers allowed), an agent, quick retries."""
    async with Reach.start(**FAST, a2a=True, a2a_push_private=True) as reach:
        assert reach.a2a is not None
        reach.a2a.pusher.backoff = QUICK
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            yield reach
        finally:
            await agent.close(drain=0.2)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_receiver_that_keeps_failing_gets_every_try_then_a_dead_letter() -> None:
    async with door() as reach, receiving([500] * (TRIES + 1)) as receiver:
        assert reach.a2a_url is not None and reach.a2a is not None
        async with a2a_client(reach.a2a_url) as client:
            request = call("echo.run", {})
            config = request.configuration.task_push_notification_config
            config.url = receiver.url
            config.authentication.scheme = "Bearer"
            config.authentication.credentials = "s3cret"
            [event] = await send(client, request)
            pusher = reach.a2a.pusher
            await asyncio.wait_for(pusher.settled(), 5)
        assert receiver.tries == TRIES
        [dead] = pusher.dead
        assert dead.reason == "HTTP 500" and dead.task.task_id == event.task.id
        # The last answer is a success: the replay delivers, with the credentials.
        receiver.fail.clear()
        assert pusher.replay() == [event.task.id]
        await asyncio.wait_for(receiver.arrived.wait(), 5)
        [(headers, _)] = receiver.got
        assert headers["Authorization"] == "Bearer s3cret"


async def test_a_receiver_that_is_not_listening_is_a_dead_letter_saying_so() -> None:
    async with door() as reach:
        assert reach.a2a_url is not None and reach.a2a is not None
        url = f"http://127.0.0.1:{unused_port()}/hook"
        async with a2a_client(reach.a2a_url) as client:
            request = call("echo.run", {})
            request.configuration.task_push_notification_config.url = url
            await send(client, request)
            await asyncio.wait_for(reach.a2a.pusher.settled(), 5)
        [dead] = reach.a2a.pusher.dead
        assert "Connect" in dead.reason and reach.a2a.pusher.delivered == 0


async def test_a_hanging_receiver_is_cut_at_a_stop() -> None:
    loop = asyncio.get_running_loop()
    async with hanging() as hook:
        async with door() as reach:
            assert reach.a2a_url is not None and reach.a2a is not None
            reach.a2a.pusher.close_grace = 0.05
            async with a2a_client(reach.a2a_url) as client:
                request = call("echo.run", {})
                request.configuration.task_push_notification_config.url = hook.url
                await send(client, request)
                await asyncio.wait_for(hook.entered.wait(), 5)
            stopping = loop.time()
        assert loop.time() - stopping < 2.0  # the stop did not wait for the receiver


async def test_configs_are_bounded_per_task_and_must_be_http() -> None:
    go = asyncio.Event()
    async with Reach.start(**FAST, a2a=True, a2a_push_private=True) as reach:
        assert reach.a2a_url is not None and reach.a2a is not None
        reach.a2a.pusher.backoff = QUICK  # the configs' sends at the end fail fast
        agent = slow(go)
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url) as client:
                task_id = (await accepted(client, "slow.read")).id
                for n in range(MAX_PER_TASK):
                    await client.create_task_push_notification_config(
                        pb.TaskPushNotificationConfig(task_id=task_id, id=f"c{n}",
                                                      url="http://127.0.0.1:9/hook"))
                # The same id again replaces; one more is refused.
                await client.create_task_push_notification_config(
                    pb.TaskPushNotificationConfig(task_id=task_id, id="c0",
                                                  url="http://127.0.0.1:9/other"))
                with pytest.raises(InvalidParamsError, match="too many push"):
                    await client.create_task_push_notification_config(
                        pb.TaskPushNotificationConfig(task_id=task_id, id="one-more",
                                                      url="http://127.0.0.1:9/hook"))
                with pytest.raises(InvalidParamsError, match="not http"):
                    await client.create_task_push_notification_config(
                        pb.TaskPushNotificationConfig(task_id=task_id,
                                                      url="ftp://127.0.0.1/hook"))
                # Deleting one that is not there changes nothing; deleting one of many
                # keeps the rest.
                await client.delete_task_push_notification_config(
                    pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="nope"))
                await client.delete_task_push_notification_config(
                    pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="c1"))
                listed = await client.list_task_push_notification_configs(
                    pb.ListTaskPushNotificationConfigsRequest(task_id=task_id))
                assert len(listed.configs) == MAX_PER_TASK - 1
                assert {c.id: c.url for c in listed.configs}["c0"] == \
                    "http://127.0.0.1:9/other"
        finally:
            go.set()
            await agent.close(drain=0.2)
