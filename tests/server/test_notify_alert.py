"""An undelivered webhook raises an ``undelivered`` alert (docs/alerts.md) that resolves once
a replay delivered it; the alert itself goes out by the alert webhook, by the same POST
rules. Real loopback receivers for both, millisecond backoffs and evaluations."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from notify_rig import FAST, LOOPBACK, QUICK, free_port, receiver, working

from reach import Client, Reach
from reach.alert_rules import AlertConfig, Webhook
from reach.core import alerts as al


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


async def test_an_undelivered_webhook_fires_an_alert_that_a_replay_resolves() -> None:
    port = free_port()
    async with receiver() as pager:
        rules = AlertConfig(rules=(al.Rule("webhooks", al.UNDELIVERED, capabilities=("echo.*",)),),
                            webhooks=(Webhook("pager", pager.url, backoff=QUICK),),
                            interval=0.01)
        async with Reach.start(**FAST, notify_allow=LOOPBACK, alerts=rules) as reach, \
                working(reach.url):
            reach.pusher.backoff = QUICK
            async with Client.connect(reach.url, caller="planner") as client:
                handle = await client.submit("echo.run", {}, notify=f"http://127.0.0.1:{port}/hook")
                await handle.result(timeout=5)
            await asyncio.wait_for(reach.pusher.settled(), 5)
            await until(lambda: bool(reach.alerts()))
            [alert] = reach.alerts()
            assert (alert["kind"], alert["value"], alert["unit"]) == (
                "undelivered", 1, "notifications")
            assert "1 task notifications undelivered" in alert["summary"]
            async with receiver(port=port) as hook:
                assert reach.pusher.replay() == [handle.task_id]
                await hook.one()
                await asyncio.wait_for(reach.pusher.settled(), 5)
                await until(lambda: not reach.alerts())
            await until(lambda: len(pager.got) == 2)
    assert [d.json["state"] for d in pager.got] == ["firing", "resolved"]
    assert {d.json["kind"] for d in pager.got} == {"undelivered"}
