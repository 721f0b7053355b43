"""A wrong URL is not a stopped coordinator (issue 14): the error says which it is and what
to try, for both SDKs."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from aiohttp import web

from reach import Agent, Client
from reach.errors import Unavailable


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])  # bound, never listening: connections are refused


def agent() -> Agent:
    a = Agent("w", reconnect_base=0.01)
    a.capability("x.run")(lambda: 1)
    return a


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_an_http_url_names_the_rest_front_door_and_the_ws_form(scheme: str) -> None:
    url = f"{scheme}://127.0.0.1:8766"
    for opening in (Client.connect(url), agent().connect(url)):
        with pytest.raises(Unavailable) as err:
            await opening
        assert err.value.message == (
            f"{url!r} is not a websocket URL (http:// is the REST front door's; the SDKs speak "
            f"websocket): use ws://HOST:PORT, as `reach serve` and `reach.url` print it")
        assert "is it running" not in err.value.message


async def test_a_url_without_a_scheme_says_the_form() -> None:
    with pytest.raises(Unavailable, match=r"'127\.0\.0\.1:8765' is not a websocket URL: use "):
        await Client.connect("127.0.0.1:8765")


async def test_a_refused_connection_asks_whether_it_runs(closed_port: int) -> None:
    url = f"ws://127.0.0.1:{closed_port}"
    for opening in (Client.connect(url), agent().connect(url)):
        with pytest.raises(Unavailable, match=r"cannot reach a coordinator at .*is it running"):
            await opening


async def test_an_http_server_on_the_port_is_not_a_coordinator(
        unused_tcp_port: int) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    try:
        with pytest.raises(Unavailable, match=r"something answers at ws://127\.0\.0\.1:\d+ but "
                                              r"not as a Reach coordinator \(.*\): check the "
                                              r"port"):
            await Client.connect(f"ws://127.0.0.1:{unused_tcp_port}")
    finally:
        await runner.cleanup()
