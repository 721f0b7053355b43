"""A push notification the receiver refused is a dead letter that outlives a restart, and an
operator lists and replays it from a shell (``reach pushes``, ``reach pushes --replay``) or
with ``reach.Admin``. A coordinator without the A2A door still has its sender (task
webhooks use it). The CLI runs as a subprocess against a coordinator in the test, as an
operator's would."""

from __future__ import annotations

import asyncio
from pathlib import Path

from a2a.types import a2a_pb2 as pb
from a2a_door.conftest import FAST, a2a_client, call, send, worked
from a2a_door.test_a2a_push import receiving
from test_admin_cli import Served

from reach import Admin, Reach

TOKEN = "push-adm1n-s3cret"


async def _two_tasks(reach: Reach, url: str) -> list[str]:
    """Two finished tasks, each with a push config to ``url``; their ids."""
    assert reach.a2a is not None
    ids = []
    async with worked(reach) as client:
        for n in range(2):
            [event] = await send(client, call("echo.run", {"n": n}))
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=event.task.id, url=url))
            ids.append(event.task.id)
    await asyncio.wait_for(reach.a2a.pusher.settled(), 5)
    return ids


async def test_an_undelivered_push_outlives_a_restart_and_is_replayed_from_a_shell(
        tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    opts = dict(FAST, a2a=True, a2a_push_private=True, store=store, admin_token=TOKEN)
    async with receiving([404, 404]) as receiver:  # not retried: each a dead letter at once
        async with Reach.start(**opts) as reach:
            first, second = await _two_tasks(reach, receiver.url)
            async with Admin.connect(reach.url, token=TOKEN) as admin:
                before = await admin.push_dead_letters()
        assert [d["task_id"] for d in before] == [first, second]
        assert {d["reason"] for d in before} == {"HTTP 404"}
        assert before[0]["url"] == receiver.url and before[0]["capability"] == "echo.run"

        async with Reach.start(**opts) as again:  # the receiver is fixed meanwhile
            shell = Served(again.url, {})
            listed = await shell.reach("pushes", "--json", token=TOKEN)
            assert listed.rc == 0, listed.err
            assert listed.json()["push_dead_letters"] == before  # kept as they were
            human = await shell.reach("pushes", token=TOKEN)
            assert human.rc == 0 and first in human.out and "HTTP 404" in human.out

            one = await shell.reach("pushes", "--replay", "--task", second, "--json",
                                    token=TOKEN)
            assert one.rc == 0 and one.json() == {"replayed": [second]}, one.err
            await asyncio.wait_for(receiver.arrived.wait(), 5)
            assert receiver.got[0][1]["task"]["id"] == second
            assert again.a2a is not None
            await asyncio.wait_for(again.a2a.pusher.settled(), 5)
            async with Admin.connect(again.url, token=TOKEN) as admin:
                assert [d["task_id"] for d in await admin.push_dead_letters()] == [first]
                assert await admin.replay_pushes() == [first]
                await asyncio.wait_for(again.a2a.pusher.settled(), 5)
                assert await admin.push_dead_letters() == []
            assert sorted(body["task"]["id"] for _, body in receiver.got) == sorted(
                [first, second])

        async with Reach.start(**opts) as third:  # delivered: nothing is kept any more
            async with Admin.connect(third.url, token=TOKEN) as admin:
                assert await admin.push_dead_letters() == []
            assert third.a2a is not None and not third.a2a.pusher.configs


async def test_a_replay_that_fails_again_is_a_dead_letter_again(tmp_path: Path) -> None:
    opts = dict(FAST, a2a=True, a2a_push_private=True, admin_token=TOKEN,
                store=f"sqlite:///{tmp_path / 'reach.db'}")
    async with receiving([404, 404, 410]) as receiver, Reach.start(**opts) as reach:
        first, second = await _two_tasks(reach, receiver.url)
        assert reach.a2a is not None
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            assert await admin.replay_pushes(first) == [first]
            await asyncio.wait_for(reach.a2a.pusher.settled(), 5)
            letters = await admin.push_dead_letters()
        assert [(d["task_id"], d["reason"]) for d in letters] == [
            (second, "HTTP 404"), (first, "HTTP 410")]
        assert receiver.tries == 3 and not receiver.got


async def test_a_coordinator_without_the_a2a_door_still_has_its_sender() -> None:
    # (issue 31: the coordinator owns the one sender, which task webhooks use too, so its
    # letters are listed with the A2A door off; before, this was refused "no A2A door")
    async with Reach.start(http_port=None, admin_token=TOKEN) as reach:
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            assert await admin.push_dead_letters() == []
            assert await admin.replay_pushes() == []
        shell = Served(reach.url, {})
        listed = await shell.reach("pushes", token=TOKEN)
        assert listed.rc == 0 and "none undelivered" in listed.out, listed.err
        usage = await shell.reach("pushes", "--task", "abc", token=TOKEN)
        assert usage.rc == 2 and "--replay" in usage.err


async def test_a_deleted_config_leaves_no_dead_letter_to_replay(tmp_path: Path) -> None:
    opts = dict(FAST, a2a=True, a2a_push_private=True, admin_token=TOKEN,
                store=f"sqlite:///{tmp_path / 'reach.db'}")
    async with receiving([404, 404]) as receiver, Reach.start(**opts) as reach:
        first, second = await _two_tasks(reach, receiver.url)
        assert reach.a2a is not None and reach.a2a_url is not None
        [dead] = [d for d in reach.a2a.pusher.dead if d.task.task_id == first]
        async with a2a_client(reach.a2a_url) as client:
            await client.delete_task_push_notification_config(
                pb.DeleteTaskPushNotificationConfigRequest(task_id=first, id=dead.config.id))
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            assert [d["task_id"] for d in await admin.push_dead_letters()] == [second]
            assert await admin.replay_pushes(first) == []
    async with Reach.start(**opts) as again:  # and its row is gone
        assert again.a2a is not None
        assert [d.task.task_id for d in again.a2a.pusher.dead] == [second]
