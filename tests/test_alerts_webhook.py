"""Alerts end to end: a real coordinator, real agents over loopback websockets, and a real
aiohttp webhook receiver on loopback; millisecond thresholds and backoffs.

FIELD.md's lessons behind it: "Each agent invents its own retry loop ... failures are debugged
by shouting" — the coordinator says when something is wrong, to whoever is on call, once."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from reach import ReachError
from reach.alert_rules import AlertConfig, Webhook
from reach.core import alerts as al
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until

FAST = Backoff(base=0.005, factor=2.0, cap=0.02, jitter=0.5, mode="below")


class Receiver:
    """A webhook receiver: records every body; answers ``fail`` (in order) before 200s."""

    def __init__(self, fail: list[int] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail = list(fail or [])
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        self.headers.append(dict(request.headers))
        if self.fail:
            return web.Response(status=self.fail.pop(0))
        return web.Response(status=204)

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    def states(self, alert_id: str) -> list[str]:
        return [b["state"] for b in self.bodies if b["id"] == alert_id]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()


def hook(url: str, **kw: Any) -> Webhook:
    options: dict[str, Any] = {"name": "oncall", "url": url, "timeout": 1.0, "attempts": 3,
                               "backoff": FAST}
    options.update(kw)
    return Webhook(**options)


def dead_url() -> str:
    """A loopback port nobody listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


async def cluster_with(*rules: al.Rule, hooks: tuple[Webhook, ...], **options: Any) -> Cluster:
    config = AlertConfig(rules=rules, webhooks=hooks, interval=0.01, queue=options.pop(
        "queue", 100))
    return await Cluster.start(alerts=config, breaker_open_for=60.0, **options)


async def fail() -> None:
    raise RuntimeError("ledger disk full")


async def test_breaker_open_and_no_agent_fire_then_resolve_at_a_real_receiver(
        receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reach")
    cluster = await cluster_with(
        al.Rule("unserved", al.NO_AGENT, capabilities=("ledger.write",), hold=0.02),
        al.Rule("stuck", al.BREAKER_OPEN, threshold=0.05, agents=("flaky*",)),
        hooks=(hook(receiver.url, headers=(("Authorization", "Bearer s3cret"),)),),
        json_logs=True)
    reach = cluster.reach
    try:
        unserved = "unserved/ledger.write/*"
        await wait_until(lambda: receiver.states(unserved) == ["firing"])
        first = next(b for b in receiver.bodies if b["id"] == unserved)
        assert first["coordinator"] == reach.url and first["kind"] == "no_agent"
        assert (first["capability"], first["agent"], first["value"], first["threshold"]) == (
            "ledger.write", None, 0, 1)
        assert first["fired_at"] - first["since"] >= 0.02
        assert receiver.headers[0]["Authorization"] == "Bearer s3cret"
        assert [a["id"] for a in reach.alerts()] == [unserved]

        async def write() -> str:
            return "ok"
        await cluster.add_agent("ledger", {"ledger.write": write})
        await wait_until(lambda: receiver.states(unserved) == ["firing", "resolved"])
        assert reach.alerts() == []

        await cluster.add_agent("flaky-1", {"x.fail": fail})
        client = await cluster.client("planner")
        for _ in range(5):
            with pytest.raises(ReachError):
                await client.call("x.fail", {}, max_retries=0)
        stuck = "stuck/*/flaky-1"
        await wait_until(lambda: receiver.states(stuck) == ["firing"])
        body = next(b for b in receiver.bodies if b["id"] == stuck)
        opened = reach.registry.by_name["flaky-1"].breaker.opened_at
        # (>=: the body rounds the value to 3 places, so 0.0502 s open is sent as 0.05)
        assert body["since"] == opened and body["value"] >= 0.05 and body["unit"] == "s"
        assert body["summary"] == "breaker open 0 s on flaky-1"
        reach.reset_breaker("flaky-1")
        await wait_until(lambda: receiver.states(stuck) == ["firing", "resolved"])

        ticks = reach.alerting.ticks if reach.alerting else 0
        await wait_until(lambda: reach.alerting is not None and reach.alerting.ticks > ticks + 5)
        assert receiver.states(unserved) == ["firing", "resolved"]  # once each, no repeats
        assert receiver.states(stuck) == ["firing", "resolved"]
        assert reach.alerting is not None and reach.alerting.stats() == [{
            "webhook": "oncall", "url": receiver.url, "queued": 0, "delivered": 4,
            "failed": 0, "dropped": 0, "attempts": 4}]
    finally:
        await cluster.close()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "reach.events"
             and '"event": "alert"' in r.getMessage()]
    assert [(x["id"], x["state"]) for x in lines] == [
        (unserved, "firing"), (unserved, "resolved"), (stuck, "firing"), (stuck, "resolved")]
    warned = [r.getMessage() for r in caplog.records if r.name == "reach.alerts"]
    assert warned[0] == "alert firing: no agent for ledger.write for 0 s (rule unserved)"
    assert len(warned) == 4


async def test_a_receiver_failing_twice_gets_the_page_on_the_third_try() -> None:
    receiver = await Receiver(fail=[503, 429]).start()
    cluster = await cluster_with(al.Rule("unserved", al.NO_AGENT, capabilities=("a.b",)),
                                 hooks=(hook(receiver.url),))
    try:
        await wait_until(lambda: len(receiver.bodies) == 3)
        assert [b["id"] for b in receiver.bodies] == ["unserved/a.b/*"] * 3
        assert receiver.bodies[0] == receiver.bodies[2]  # the same notification, re-sent
        alerting = cluster.reach.alerting
        assert alerting is not None
        await wait_until(lambda: alerting.stats()[0]["delivered"] == 1)
        assert alerting.stats()[0] | {"url": ""} == {
            "webhook": "oncall", "url": "", "queued": 0, "delivered": 1, "failed": 0,
            "dropped": 0, "attempts": 3}
    finally:
        await cluster.close()
        await receiver.stop()


async def test_a_refusal_is_final_and_spent_attempts_give_up(
        caplog: pytest.LogCaptureFixture) -> None:
    receiver = await Receiver(fail=[400, 500, 502, 503]).start()
    cluster = await cluster_with(
        al.Rule("one", al.NO_AGENT, capabilities=("a.b",)),
        hooks=(hook(receiver.url, name="h", attempts=3),))
    try:
        alerting = cluster.reach.alerting
        assert alerting is not None
        await wait_until(lambda: alerting.stats()[0]["failed"] == 1)
        assert alerting.stats()[0]["attempts"] == 1  # a 400: not retried
        async def serve() -> int:
            return 1
        await cluster.add_agent("w", {"a.b": serve})  # resolved: 500, 502, 503 → given up
        await wait_until(lambda: alerting.stats()[0]["failed"] == 2)
        assert alerting.stats()[0]["attempts"] == 4
        assert [b["state"] for b in receiver.bodies] == ["firing"] + ["resolved"] * 3
    finally:
        await cluster.close()
        await receiver.stop()
    gave_up = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert gave_up == [
        "alert webhook h: gave up on firing one/a.b/* after 1 attempt(s): HTTP 400",
        "alert webhook h: gave up on resolved one/a.b/* after 3 attempt(s): HTTP 503"]


async def test_a_dead_receiver_costs_a_bounded_queue_not_the_coordinator(
        caplog: pytest.LogCaptureFixture) -> None:
    caps = tuple(f"cap.n{i}" for i in range(30))
    cluster = await cluster_with(al.Rule("unserved", al.NO_AGENT, capabilities=caps),
                                 hooks=(hook(dead_url(), attempts=2),), queue=3)
    try:
        alerting = cluster.reach.alerting
        assert alerting is not None
        # 30 pages in one evaluation: the queue keeps the newest 3, each tried twice.
        await wait_until(lambda: alerting.stats()[0]["failed"] == 3)
        stats = alerting.stats()[0]
        assert (stats["queued"], stats["delivered"], stats["dropped"], stats["attempts"]) == (
            0, 0, 27, 6)
        assert len(cluster.reach.alerts()) == 30

        async def echo(x: int) -> int:
            return x
        await cluster.add_agent("w", {"cap.echo": echo})
        client = await cluster.client()
        started = asyncio.get_running_loop().time()
        assert await client.call("cap.echo", {"x": 4}) == 4
        assert asyncio.get_running_loop().time() - started < 1.0
    finally:
        await cluster.close()
    drops = [r.getMessage() for r in caplog.records if "queue full" in r.getMessage()]
    assert [m.split("(")[-1] for m in drops] == [  # logged at 1, 2, 4, 8, 16 drops
        f"{n} dropped so far)" for n in (1, 2, 4, 8, 16)]
    assert any("ConnectionRefused" in r.getMessage() or "Cannot connect" in r.getMessage()
               for r in caplog.records if "gave up" in r.getMessage())


async def test_a_receiver_slower_than_the_timeout_is_retried_then_given_up(
        caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cluster = await cluster_with(al.Rule("u", al.NO_AGENT, capabilities=("a.b",)),
                                 hooks=(hook(f"http://127.0.0.1:{port}/hook", timeout=0.05,
                                             attempts=2),))
    try:
        alerting = cluster.reach.alerting
        assert alerting is not None
        await wait_until(lambda: alerting.stats()[0]["failed"] == 1)
        assert alerting.stats()[0]["attempts"] == 2
    finally:
        await cluster.close()
        release.set()
        await runner.cleanup()
    assert "gave up on firing u/a.b/* after 2 attempt(s): " in caplog.text
