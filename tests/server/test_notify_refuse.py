"""A webhook URL Reach will not POST to is refused when the task is submitted, before it is
accepted, with ``invalid_params`` and a message saying what to do: a private, loopback or
link-local target (unless ``notify_allow`` names its network), or a URL that is not http(s).
Over the SDK (websocket) and the REST door; the agent never gets the work."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from notify_rig import FAST, LOOPBACK, working

from reach import Client, InvalidParams, Reach, Settings

PRIVATE = ["http://127.0.0.1:9/hook", "http://10.0.0.1/hook", "http://169.254.169.254/x",
           "http://[::1]:9/hook", "http://192.168.1.20/hook", "http://localhost:9/hook"]


async def _rest(reach: Reach, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{reach.http_url}/v1/tasks", json=body) as answer:
        return answer.status, await answer.json(content_type=None)


@pytest.mark.parametrize("url", PRIVATE)
async def test_a_private_target_is_refused_at_submit(url: str) -> None:
    async with Reach.start(**FAST) as reach, working(reach.url) as worker:
        async with Client.connect(reach.url, caller="planner") as client:
            with pytest.raises(InvalidParams, match="notify_allow") as refused:
                await client.submit("echo.run", {}, notify=url)
            assert refused.value.code == "invalid_params"
        status, problem = await _rest(reach, {"capability": "echo.run", "notify": url})
        assert status == 422 and problem["code"] == "invalid_params", problem
        assert "notify_allow" in problem["detail"]
    assert worker.calls == 0  # nothing was accepted


async def test_notify_allow_admits_its_networks_only() -> None:
    async with Reach.start(**FAST, notify_allow=LOOPBACK) as reach, working(reach.url) as worker:
        async with Client.connect(reach.url, caller="planner") as client:
            with pytest.raises(InvalidParams, match=r"10\.0\.0\.1.*notify_allow"):
                await client.submit("echo.run", {}, notify="http://10.0.0.1/hook")
            handle = await client.submit("echo.run", {}, notify="http://127.0.0.1:9/hook")
            await handle.result(timeout=5)  # admitted (the receiver is down: not our task)
        status, problem = await _rest(reach, {"capability": "echo.run",
                                              "notify": "http://10.1.2.3/hook"})
        assert (status, problem["code"]) == (422, "invalid_params")
    assert worker.calls == 1


async def test_a_url_that_is_not_http_is_refused() -> None:
    async with Reach.start(**FAST, notify_allow=LOOPBACK) as reach:
        async with Client.connect(reach.url, caller="planner") as client:
            with pytest.raises(InvalidParams, match="http"):
                await client.submit("echo.run", {}, notify="ftp://127.0.0.1/hook")
        status, problem = await _rest(reach, {"capability": "echo.run",
                                              "notify": "file:///etc/passwd"})
        assert (status, problem["code"]) == (422, "invalid_params")


@pytest.mark.parametrize(("url", "why"), [("http://127.0.0.1:99999/hook", "cannot be read"),
                                          ("http://:80/hook", "names no host")])
async def test_a_url_that_names_no_receiver_is_refused(url: str, why: str) -> None:
    async with Reach.start(**FAST, notify_allow=LOOPBACK) as reach:
        async with Client.connect(reach.url, caller="planner") as client:
            with pytest.raises(InvalidParams, match=why):
                await client.submit("echo.run", {}, notify=url)


def test_a_bad_network_in_notify_allow_is_named_at_start() -> None:
    with pytest.raises(ValueError, match="notify_allow: 'ten-slash-eight' is not a network"):
        Reach(Settings(notify_allow=["127.0.0.0/8", "ten-slash-eight"]))
