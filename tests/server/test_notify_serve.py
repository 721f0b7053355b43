"""``reach serve --notify-allow CIDR`` names the private networks webhooks may reach, and
``REACH_NOTIFY_SECRET`` is the secret they are signed with: a real ``reach serve``
subprocess, a websocket agent and caller, a loopback receiver. And a cron job's way in:
``reach submit --notify URL`` from a shell, then the signed outcome at the URL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from notify_rig import free_port, receiver, verifier, working
from test_admin_cli import Served

from reach import Client, InvalidParams, Reach

SECRET = "a-secret-from-the-environment"


async def test_reach_serve_takes_notify_allow_and_the_secret(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REACH_")}
    env["REACH_NOTIFY_SECRET"] = SECRET
    log = open(tmp_path / "serve.err", "wb")  # noqa: SIM115 - closed below
    serve = subprocess.Popen(
        [sys.executable, "-m", "reach.cli", "serve", "--port", str(port), "--no-http",
         "--store", "sqlite://", "--notify-allow", "127.0.0.0/8", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)
    url = f"ws://127.0.0.1:{port}"
    try:
        assert serve.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(serve.stdout.readline), 30)
        assert b"listening on" in first, first
        async with receiver() as hook, working(url), \
                Client.connect(url, caller="planner") as client:
            with pytest.raises(InvalidParams, match="notify_allow"):
                await client.submit("echo.run", {}, notify="http://10.0.0.1/hook")
            handle = await client.submit("echo.run", {"n": 2}, notify=hook.url)
            await handle.result(timeout=5)
            delivery = await hook.one()
        assert delivery.json["task_id"] == handle.task_id
        assert verifier()(SECRET, delivery.headers, delivery.body)
    finally:
        serve.kill()
        serve.wait(10)
        if serve.stdout is not None:
            serve.stdout.close()
        log.close()


async def test_a_cron_job_submits_from_a_shell_and_is_notified() -> None:
    async with receiver() as hook, Reach.start(heartbeat_interval=0.5, notify_allow=[
            "127.0.0.0/8"]) as reach, working(reach.url):
        shell = Served(reach.url, {})
        handed = await shell.reach("submit", "echo.run", '{"n": 4}', "--notify", hook.url,
                                   "--json", token=None)
        assert handed.rc == 0, handed.err
        delivery = await hook.one()
        refused = await shell.reach("submit", "echo.run", "{}", "--notify",
                                    "http://10.0.0.1/hook", token=None)
        secret = reach.notify_secret
    assert delivery.json["task_id"] == handed.json()["task_id"]
    assert delivery.json["result"] == {"echo": {"n": 4}}
    assert secret is not None and verifier()(secret, delivery.headers, delivery.body)
    assert refused.rc == 4 and "notify_allow" in refused.err  # invalid_params
