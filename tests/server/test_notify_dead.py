"""A webhook whose receiver stays down is retried, then dead-lettered — listed with its kind
(``Admin.push_dead_letters``, ``reach pushes``), replayable (``reach pushes --replay``) once
the receiver is back — and the task's own outcome is untouched. A failed task sends state
``failed`` with its error code, a cancelled one ``cancelled``; a coordinator restart on the
same SQLite file sends a notification a stop left pending. Loopback receivers, millisecond
backoffs, the CLI as a subprocess."""

from __future__ import annotations

import asyncio
from pathlib import Path

from notify_rig import FAST, LOOPBACK, QUICK, Worker, free_port, receiver, working
from test_admin_cli import Served

from reach import Admin, Client, Reach, TaskError
from reach.core.backoff import Backoff

TOKEN = "notify-adm1n-s3cret"


async def test_a_dead_receiver_is_a_dead_letter_and_a_replay_delivers(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    opts = dict(FAST, notify_allow=LOOPBACK, admin_token=TOKEN,
                store=f"sqlite:///{tmp_path / 'reach.db'}")
    async with Reach.start(**opts) as reach, working(reach.url):
        reach.pusher.backoff = QUICK
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("echo.run", {"n": 7}, notify=url)
            assert await handle.result(timeout=5) == {"echo": {"n": 7}}
            await asyncio.wait_for(reach.pusher.settled(), 5)
            view = await client.status(handle.task_id)
        assert view["state"] == "succeeded"  # the task's own outcome is untouched
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            [letter] = await admin.push_dead_letters()
        assert (letter["task_id"], letter["kind"], letter["url"]) == (handle.task_id,
                                                                      "webhook", url)
        assert "Connect" in letter["reason"] and letter["capability"] == "echo.run"

        shell = Served(reach.url, {})
        listed = await shell.reach("pushes", token=TOKEN)
        assert listed.rc == 0 and "webhook" in listed.out and handle.task_id in listed.out

        async with receiver(port=port) as hook:  # the receiver is back
            replayed = await shell.reach("pushes", "--replay", "--json", token=TOKEN)
            assert replayed.rc == 0 and replayed.json() == {"replayed": [handle.task_id]}
            delivery = await hook.one()
            await asyncio.wait_for(reach.pusher.settled(), 5)
        assert delivery.json["task_id"] == handle.task_id
        assert delivery.json["state"] == "succeeded" and len(hook.got) == 1
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            assert await admin.push_dead_letters() == []
            assert await admin.notify_secret() == reach.notify_secret
        secret = await shell.reach("pushes", "--notify-secret", token=TOKEN)
        assert secret.rc == 0 and secret.out.strip() == reach.notify_secret


async def test_a_failed_task_says_failed_with_its_error_code() -> None:
    async with receiver() as hook, Reach.start(**FAST, notify_allow=LOOPBACK) as reach, \
            working(reach.url):
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("orders.cancel", {"order": "x1"}, notify=hook.url)
            try:
                await handle.result(timeout=5)
            except TaskError:
                pass
            body = (await hook.one()).json
    assert (body["task_id"], body["state"], body["attempts"]) == (handle.task_id, "failed", 1)
    assert body["error"]["code"] == "task_failed" and "x1" in body["error"]["message"]
    assert "result" not in body


async def test_a_cancelled_task_says_cancelled() -> None:
    async with receiver() as hook, Reach.start(**FAST, notify_allow=LOOPBACK) as reach, \
            working(reach.url):
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("slow.read", {}, notify=hook.url)
            await handle.cancel()
            body = (await hook.one()).json
    assert (body["task_id"], body["state"]) == (handle.task_id, "cancelled")
    assert body["error"]["code"]


async def test_a_restart_on_the_same_file_sends_a_pending_notification(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    opts = dict(FAST, notify_allow=LOOPBACK, store=store)
    async with Reach.start(**opts) as reach, working(reach.url):
        # The receiver is down and the next try is far off: the stop cuts the delivery, and
        # its row stays pending (not a dead letter).
        reach.pusher.backoff = Backoff(base=30.0, cap=30.0, jitter=0.0)
        reach.pusher.close_grace = 0.05
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("echo.run", {"n": 3}, notify=url)
            await handle.result(timeout=5)
    async with receiver(port=port) as hook:
        async with Reach.start(**opts) as again:
            delivery = await hook.one()
            await asyncio.wait_for(again.pusher.settled(), 5)
        assert delivery.json["task_id"] == handle.task_id and len(hook.got) == 1
        async with Reach.start(**opts) as third:  # delivered: nothing is kept any more
            await asyncio.wait_for(third.pusher.settled(), 5)
            assert not third.pusher.configs and not third.pusher.dead
        assert len(hook.got) == 1


async def test_a_task_unfinished_at_a_stop_notifies_when_it_ends_after_the_restart(
        tmp_path: Path) -> None:
    opts = dict(FAST, notify_allow=LOOPBACK, store=f"sqlite:///{tmp_path / 'reach.db'}")
    async with receiver() as hook:
        async with Reach.start(**opts) as reach:
            held = Worker()  # holds the task until the stop (its agent leaves first)
            await held.agent.connect(reach.url)
            async with Client.connect(reach.url, caller="planner") as client:
                handle = await client.submit("slow.read", {}, notify=hook.url)
                while held.calls == 0:
                    await asyncio.sleep(0.005)
            await held.agent.close(drain=0.01)
        assert not hook.got
        async with Reach.start(**opts) as again:
            assert list(again.pusher.configs) == [handle.task_id]  # kept with the task
            async with working(again.url) as worker:
                worker.go.set()  # the resumed task runs, and ends
                delivery = await hook.one()
    assert (delivery.json["task_id"], delivery.json["state"]) == (handle.task_id, "succeeded")
    assert delivery.json["result"] == {"done": True}


async def test_a_chain_cut_by_a_restart_notifies_once_it_ends(tmp_path: Path) -> None:
    opts = dict(FAST, notify_allow=LOOPBACK, store=f"sqlite:///{tmp_path / 'reach.db'}")
    async with receiver() as hook:
        async with Reach.start(**opts) as reach:
            held = Worker()  # runs the head, then holds step 2 until the stop
            await held.agent.connect(reach.url)
            async with Client.connect(reach.url, caller="planner") as client:
                head = await client.submit("echo.run", {}, notify=hook.url, then="slow.read")
                while held.calls < 2:
                    await asyncio.sleep(0.005)
            await held.agent.close(drain=0.01)
        assert not hook.got
        async with Reach.start(**opts) as again:
            async with working(again.url) as worker:
                worker.go.set()
                delivery = await hook.one()
    body = delivery.json
    assert (body["state"], body["result"]) == ("succeeded", {"done": True})
    assert body["chain"] == {"head": head.task_id, "step": 2, "of": 2} and len(hook.got) == 1
