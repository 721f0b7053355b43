"""An ASGI app mounted on the REST front door: same port, tokens, limits; lifespan in start/stop.

A plain ASGI callable stands in for the SDKs' Starlette apps (the core install has no
Starlette); the MCP and A2A doors are tested with the official clients in their own files.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from conftest import FAST

from reach import Reach
from reach.server.front import FrontDoor


class EchoApp:
    """Answers each request with what it saw; records its lifespan."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.events.append(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        message = await receive()
        body = json.dumps({"path": scope["path"], "root_path": scope["root_path"],
                           "query": scope["query_string"].decode(),
                           "caller": scope["reach"]["caller"],
                           "body": message["body"].decode(),
                           "started": self.events}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"x-app", b"1")]})
        await send({"type": "http.response.body", "body": body[:5], "more_body": True})
        await send({"type": "http.response.body", "body": body[5:]})


@pytest_asyncio.fixture
async def door() -> AsyncIterator[tuple[FrontDoor, EchoApp]]:
    async with Reach.start(**FAST, tokens={"tok-a": "alice"}, max_frame_bytes=4096) as reach:
        front = FrontDoor(reach.channel.services)
        app = EchoApp()
        front.mount("/asgi", app)
        await front.start("127.0.0.1", 0)
        try:
            yield front, app
        finally:
            await front.stop()
            assert app.events == ["lifespan.startup", "lifespan.shutdown"]


async def test_the_app_is_served_under_its_prefix_with_the_caller_named(door: Any) -> None:
    front, app = door
    url = f"http://127.0.0.1:{front.port}"
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/asgi/deep/path?q=1", data=b'{"x": 1}',
                             headers={"Authorization": "Bearer tok-a"}) as r:
            assert r.status == 200 and r.headers["x-app"] == "1"
            seen = await r.json()
    assert seen == {"path": "/asgi/deep/path", "root_path": "/asgi", "query": "q=1",
                    "caller": "alice", "body": '{"x": 1}', "started": ["lifespan.startup"]}


async def test_the_door_s_tokens_host_check_and_body_limit_apply(door: Any) -> None:
    front, _ = door
    url = f"http://127.0.0.1:{front.port}"
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/asgi", data=b"{}") as r:
            assert r.status == 401
            assert r.content_type == "application/problem+json"
            assert (await r.json())["code"] == "unauthorized"
        async with http.post(url + "/asgi", data=b"{}", headers={
                "Authorization": "Bearer tok-a", "Host": "evil.example:80"}) as r:
            assert r.status == 421
            assert "DNS-rebinding" in (await r.json())["detail"]
        async with http.post(url + "/asgi", data=b"x" * 5000,
                             headers={"Authorization": "Bearer tok-a"}) as r:
            assert r.status == 413
        # REST is on the same port, as before
        async with http.get(url + "/healthz") as r:
            assert r.status in (200, 503)
            assert "status" in await r.json()


async def test_an_app_that_fails_or_says_nothing_is_a_500_and_one_without_lifespan_is_served(
        ) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            raise RuntimeError("no lifespan here")
        if scope["path"].endswith("/boom"):
            raise RuntimeError("the app failed")
        if scope["path"].endswith("/silent"):
            return
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        await send({"type": "http.response.body", "body": b""})  # (a stray one: ignored)

    async with Reach.start(**FAST) as reach:
        front = FrontDoor(reach.channel.services)
        front.mount("/plain", app)
        await front.start("127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{front.port}/plain"
            async with aiohttp.ClientSession() as http:
                async with http.get(url + "/ok") as r:
                    assert r.status == 204
                for path in ("/boom", "/silent"):
                    async with http.get(url + path) as r:
                        assert r.status == 500
                        assert (await r.json())["code"] == "reach_error"
        finally:
            await front.stop()
