"""``reach serve --alerts FILE``: a bad rules file is one line and exit 2 before anything
binds; a good one makes the real command page a real loopback webhook receiver and write the
alert as a JSON line on stdout. Plus the readings a coordinator takes for p95 and dead-letter
rules, and an evaluation bug that must not end alerting."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from subprocs import free_port, start_coordinator

from reach import ReachError
from reach.alert_rules import AlertConfig, AlertsFileError
from reach.cli import main
from reach.core import alerts as al
from reach.reach import Reach
from reach.testing import Cluster, wait_until


def test_a_bad_alerts_file_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text('[[rule]]\nname = "stuck"\nkind = "breaker_open"\n')
    assert main(["serve", "--port", "0", "--store", "sqlite://", "--alerts", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"reach: {path}, line 1 (rule 'stuck'): a breaker_open rule needs "
                   f"threshold = N (seconds)\n")


def test_reach_start_refuses_a_bad_rules_file_before_it_starts(tmp_path: Path) -> None:
    with pytest.raises(AlertsFileError, match="cannot read it"):
        Reach.start(alerts=tmp_path / "none.toml")


@pytest.fixture
def team(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM", "ledger")  # before ``spawn`` copies the environment


async def test_reach_serve_pages_a_real_receiver_and_logs_json(
        team: None, spawn: Any, tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    teams: list[str | None] = []

    async def handle(request: web.Request) -> web.Response:
        got.append(await request.json())
        teams.append(request.headers.get("X-Team"))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/page", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rules = tmp_path / "alerts.toml"
    rules.write_text(f'[alerts]\ninterval = 0.02\n[[webhook]]\nname = "oncall"\n'
                     f'url = "http://127.0.0.1:{hook_port}/page"\n'
                     f'headers = {{ X-Team = "${{TEAM}}" }}\n'
                     f'[[rule]]\nname = "unserved"\nkind = "no_agent"\n'
                     f'capability = "ledger.write"\n')
    try:
        coord = start_coordinator(spawn, "coord", free_port(), tmp_path / "r.db", "--no-http",
                                  "--alerts", rules, "--json-logs")
        await coord.wait_for("listening on")
        async with asyncio.timeout(10):
            while not got:
                await asyncio.sleep(0.02)
        assert (got[0]["state"], got[0]["id"]) == ("firing", "unserved/ledger.write/*")
        assert teams[0] == "ledger"
        line = await coord.wait_for('"event": "alert"')
        assert json.loads(line)["summary"].startswith("no agent for ledger.write")
    finally:
        await runner.cleanup()


async def slow() -> str:
    await asyncio.sleep(0.02)
    return "late"


async def quick() -> str:
    return "fast"


async def broken() -> None:
    raise RuntimeError("boom")


async def test_p95_and_dead_letter_rules_read_the_coordinators_numbers(
        caplog: pytest.LogCaptureFixture) -> None:
    rules = (al.Rule("slow", al.P95_LATENCY),  # each capability's declared latency
             al.Rule("slow-any", al.P95_LATENCY, threshold=5000.0, capabilities=("x.quick",)),
             al.Rule("letters", al.DEAD_LETTERS, threshold=1, capabilities=("x.*",)),
             al.Rule("letters-w2", al.DEAD_LETTERS, threshold=0, agents=("w2",)))
    cluster = await Cluster.start(alerts=AlertConfig(rules, interval=0.01))
    reach = cluster.reach
    try:
        await cluster.add_agent("w1", {"x.slow": slow}, latency_ms=1)
        await cluster.add_agent("w3", {"x.quick": quick}, latency_ms=10_000)
        await cluster.add_agent("w2", {"x.broken": broken})
        client = await cluster.client()
        for _ in range(3):
            assert await client.call("x.slow", {}, timeout=5) == "late"
            assert await client.call("x.quick", {}) == "fast"
        await wait_until(lambda: any(a["rule"] == "slow" for a in reach.alerts()))
        [view] = [a for a in reach.alerts() if a["rule"] == "slow"]
        assert (view["capability"], view["threshold"], view["unit"]) == ("x.slow", 1.0, "ms")
        assert view["value"] >= 20.0
        for _ in range(2):
            with pytest.raises(ReachError):
                await client.call("x.broken", {}, max_retries=0)
        await wait_until(lambda: {a["rule"] for a in reach.alerts()} >= {"letters",
                                                                          "letters-w2"})
        letters = next(a for a in reach.alerts() if a["rule"] == "letters")
        assert (letters["capability"], letters["value"], letters["threshold"]) == ("x.*", 2, 1)
        assert letters["summary"] == "2 new dead letters (over 1) on x.*"
        assert {a["rule"] for a in reach.alerts()} == {"slow", "letters", "letters-w2"}
        alerting = reach.alerting
        assert alerting is not None
        ticks = alerting.ticks
        caplog.set_level(logging.ERROR, logger="reach.alerts")
        calls = {"n": 0}
        real = alerting.observe

        def flaky(now: float) -> dict[str, list[al.Reading]]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bug in a reading")
            return real(now)
        alerting.observe = flaky  # type: ignore[method-assign]
        await wait_until(lambda: alerting.ticks > ticks + 3)
        assert "alert evaluation failed" in caplog.text
        assert len(reach.alerts()) == 3  # still judged, nothing resolved by the bug
        # Calls counted for a capability nobody declares now (say, its agents forgotten):
        # no declared latency, so only a rule with its own threshold judges it.
        reach.gateway.metrics.dispatched("ghost.cap", "gone")
        reach.gateway.metrics.ended("ghost.cap", "gone", "ok", 9.0)
        seen = alerting.observe(reach.clock.wall())
        assert sorted(r.capability or "" for r in seen["slow"]) == ["x.quick", "x.slow"]
        assert [r.capability for r in seen["slow-any"]] == ["x.quick"]
    finally:
        await cluster.close()


async def test_stopping_with_pages_queued_says_how_many_were_not_delivered(
        caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    from reach.alert_rules import Webhook
    config = AlertConfig((al.Rule("u", al.NO_AGENT, capabilities=("a.a", "b.b", "c.c")),),
                         (Webhook("h", f"http://127.0.0.1:{port}/", timeout=30.0),),
                         interval=0.01)
    cluster = await Cluster.start(alerts=config)
    alerting = cluster.reach.alerting
    assert alerting is not None
    await wait_until(lambda: alerting.stats()[0]["attempts"] == 1)
    assert alerting.stats()[0]["queued"] == 2
    await cluster.close()
    await alerting.close()  # twice: nothing left to stop
    release.set()
    await runner.cleanup()
    assert "2 alert notification(s) not delivered: the coordinator stopped" in caplog.text


async def test_a_backlog_age_rule_fires_while_a_task_waits_too_long_and_resolves() -> None:
    rules = (al.Rule("stuck", al.BACKLOG_AGE, threshold=0.05, capabilities=("x.*",)),)
    cluster = await Cluster.start(alerts=AlertConfig(rules, interval=0.01))
    reach = cluster.reach
    release = asyncio.Event()

    async def hold() -> str:
        await release.wait()
        return "done"

    try:
        await cluster.add_agent("w1", {"x.hold": hold}, max_concurrency=1)
        client = await cluster.client()
        handles = [await client.submit("x.hold", {}) for _ in range(2)]  # one waits its turn
        await wait_until(lambda: any(a["rule"] == "stuck" for a in reach.alerts()))
        [view] = reach.alerts()
        assert (view["capability"], view["unit"]) == ("x.hold", "s")
        assert view["value"] > 0.05 and "in the backlog" in view["summary"]
        release.set()
        assert [await h.result(timeout=5) for h in handles] == ["done", "done"]
        await wait_until(lambda: not reach.alerts())
    finally:
        await cluster.close()
