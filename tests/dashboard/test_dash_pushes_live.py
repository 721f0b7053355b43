"""The Pushes tab on a real coordinator (issue 28): a task's A2A push notification to a
receiver that refuses it is listed; sent again from the dashboard while the receiver still
refuses, it is reported back; sent again once the receiver takes it, it is delivered and its
row goes. A coordinator without the A2A door lists its task webhooks' letters, with their
kind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("a2a", reason="needs the a2a extra")

from a2a.types import a2a_pb2 as pb  # noqa: E402
from a2a_door.conftest import FAST, call, send, worked  # noqa: E402
from a2a_door.test_a2a_push import receiving  # noqa: E402
from notify_rig import LOOPBACK, QUICK, free_port, working  # noqa: E402

from dashboard import ReachDashboard  # noqa: E402
from dashboard.feed import FeedConnection, connect  # noqa: E402
from dashboard.screens import ConfirmScreen  # noqa: E402
from dashboard.views.pushes import PushesView  # noqa: E402
from dashboard.views.status import StatusLine  # noqa: E402
from reach import Admin, Client, Reach  # noqa: E402
from reach.testing import wait_until  # noqa: E402

SIZE = (120, 36)
TOKEN = "dash-push-t0ken"


class Counting:
    """The real feed, counting the commands the dashboard sends on it."""

    def __init__(self, feed: FeedConnection, sent: list[str]) -> None:
        self.feed, self.sent = feed, sent

    async def receive(self) -> Any:
        return await self.feed.receive()

    async def command(self, action: str, args: dict[str, Any]) -> Any:
        self.sent.append(action)
        return await self.feed.command(action, args)

    async def close(self) -> None:
        await self.feed.close()


def counting(sent: list[str]) -> Any:
    async def connector(url: str, token: str) -> FeedConnection:
        return Counting(await connect(url, token), sent)
    return connector


def shown(app: ReachDashboard) -> list[tuple[str, ...]]:
    table = app.query_one(PushesView).table
    return [tuple(cell.plain for cell in table.get_row(key)) for key in table.keys]


def caption(app: ReachDashboard) -> str:
    return str(app.query_one(PushesView).query_one("#caption").render())


async def test_a_dead_push_is_listed_replayed_into_a_refusal_then_delivered() -> None:
    opts = dict(FAST, a2a=True, a2a_push_private=True, admin_token=TOKEN)
    async with receiving([404, 404]) as receiver, Reach.start(**opts) as reach:
        async with worked(reach) as client:
            [event] = await send(client, call("echo.run", {"n": 1}))
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=event.task.id, url=receiver.url))
        task_id = event.task.id
        host = receiver.url.split("/")[2]
        app = ReachDashboard(url=reach.url, token=TOKEN, connector=connect)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.model.frames >= 1)
            await pilot.press("7")
            await wait_until(lambda: len(shown(app)) == 1)  # a 404 is not retried: dead
            [row] = shown(app)
            assert row[:5] == (task_id[:10], "a2a", "echo.run", host, "HTTP 404")
            status = app.query_one(StatusLine)

            await pilot.press("r")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")  # the receiver refuses once more
            await wait_until(lambda: "not delivered again" in status.note, timeout=5)
            assert status.note == f"push of task {task_id[:10]} not delivered again: HTTP 404"
            await wait_until(lambda: len(shown(app)) == 1)
            assert receiver.tries == 2 and not receiver.got

            await pilot.press("r", "y")  # now it takes it
            await asyncio.wait_for(receiver.arrived.wait(), 5)
            assert receiver.got[0][1]["task"]["id"] == task_id
            await wait_until(lambda: shown(app) == [] and app.model.pushes == {})
            assert caption(app) == "no undelivered push notifications"
            assert status.note == (f"sending 1 push notification of task {task_id[:10]} "
                                   f"again; one that fails again comes back to the list")
        async with Admin.connect(reach.url, token=TOKEN) as admin:  # and the coordinator agrees
            assert await admin.push_dead_letters() == []


async def test_a_coordinator_without_the_a2a_door_lists_its_webhooks() -> None:
    # (issue 31: every coordinator has its sender, which task webhooks use; before, this tab
    # said "no A2A door" here)
    url = f"http://127.0.0.1:{free_port()}/hook"  # nobody listens
    async with Reach.start(**FAST, http_port=None, admin_token=TOKEN,
                           notify_allow=LOOPBACK) as reach:
        reach.pusher.backoff = QUICK
        async with working(reach.url), Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("echo.run", {}, notify=url)
            await handle.result(timeout=5)
        await asyncio.wait_for(reach.pusher.settled(), 5)
        sent: list[str] = []
        app = ReachDashboard(url=reach.url, token=TOKEN, connector=counting(sent))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.model.frames >= 1)
            await pilot.press("7")
            await wait_until(lambda: len(shown(app)) == 1)
            [row] = shown(app)
            assert row[:4] == (handle.task_id[:10], "webhook", "echo.run", url.split("/")[2])
            assert caption(app) == "1 undelivered push notification"
            assert "push_dead_letters" in sent and app.link.state == "connected"
