"""Agents and callers given several coordinators move on when theirs goes away (issue 15).

Two independent coordinators in this process (``Reach.start``) stand for two nodes of one
Reach: they share no store, so what is shown here is the moving itself: the agent registers
with the other and serves there, the caller's new calls work there, a dead URL is skipped, a
name that resolves to two addresses counts as two coordinators. That an accepted task's
outcome survives the move is in test_failover_store.py, with coordinators sharing a file.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import fakecoord
import pytest
from websockets.asyncio.server import ServerConnection, serve

from reach import Agent, Client, Context, Reach
from reach.core.backoff import Backoff
from reach.errors import Unavailable
from reach.sdk import client as client_mod
from reach.sdk import endpoints as endpoints_mod
from reach.sdk.endpoints import Endpoints
from reach.testing import wait_until

FAST = {"heartbeat_interval": 0.05, "recovery_grace": 0.5, "drain_timeout": 0.2}


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond reconnects for the client, as for the agents below."""
    monkeypatch.setattr(client_mod, "RECONNECT", Backoff(0.005, 2.0, 0.02, jitter=0.0))


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Reach, Reach]]:
    a = await Reach.start(**FAST)
    b = await Reach.start(**FAST)
    try:
        yield a, b
    finally:
        await a.stop()
        await b.stop()


def echo_agent(name: str = "echoer") -> Agent:
    agent = Agent(name, reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("echo.run", idempotent=True)
    async def run(x: int) -> dict[str, Any]:
        return {"x": x}

    return agent


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"ws://127.0.0.1:{s.getsockname()[1]}"  # nothing listens there any more


def online_at(reach: Reach, name: str) -> bool:
    return any(a["name"] == name and a["state"] == "online" for a in reach.agents())


def moves(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " lost, " in r.getMessage()]


# ---------------------------------------------------------------- moving

async def test_an_agent_on_two_coordinators_moves_to_the_other_when_its_own_stops(
        pair: tuple[Reach, Reach], quick: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "reach.agent")
    a, b = pair
    agent = echo_agent()
    async with agent.connect([a.url, b.url]):
        assert agent.urls == (a.url, b.url)
        on, other = (a, b) if agent.url == a.url else (b, a)
        assert online_at(on, "echoer") and not online_at(other, "echoer")
        await on.stop()
        await wait_until(lambda: online_at(other, "echoer") and agent.url == other.url
                         and agent.online.is_set(), timeout=5)
        async with Client.connect(other.url, caller="planner") as client:
            assert await client.call("echo.run", {"x": 3}, timeout=5) == {"x": 3}
        assert moves(caplog) == [f"agent echoer: coordinator {on.url} lost, registered with "
                                 f"{other.url} instead"]


async def test_an_agents_own_calls_go_first_to_the_coordinator_it_is_on(
        pair: tuple[Reach, Reach]) -> None:
    a, b = pair
    agent = echo_agent()

    @agent.capability("echo.twice", idempotent=True)
    async def twice(x: int, ctx: Context) -> Any:
        return await ctx.call("echo.run", {"x": 2 * x}, timeout=5)

    async with agent.connect([a.url, b.url]):
        on = a if agent.url == a.url else b
        async with Client.connect(on.url) as client:
            assert await client.call("echo.twice", {"x": 2}, timeout=5) == {"x": 4}
        assert agent._client is not None
        assert agent._client.urls == (agent.url, *(u for u in (a.url, b.url) if u != on.url))
        assert agent._client.url == agent.url


async def test_agents_given_the_same_list_start_spread_over_it_and_move_spread() -> None:
    urls = [f"ws://127.0.0.1:{port}" for port in (7001, 7002, 7003)]
    firsts, nexts = set(), set()
    for seed in range(64):
        endpoints = Endpoints(urls, spread=random.Random(seed))
        first = await endpoints.round([])
        firsts.add(first[0].url)
        if first[0].url == urls[0]:
            endpoints.connected(first[0])
            after = await endpoints.round([])
            assert after[-1].url == urls[0]  # the lost one last
            nexts.add(after[0].url)
    assert firsts == set(urls)  # a caller's list (no spread) starts at its first: next test
    assert nexts == set(urls[1:])  # the agents of a lost one do not all go to the next


async def test_a_client_on_two_coordinators_moves_and_its_new_calls_work(
        pair: tuple[Reach, Reach], quick: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "reach.client")
    a, b = pair
    async with echo_agent("at-a").connect(a.url), echo_agent("at-b").connect(b.url):
        async with Client.connect([a.url, b.url], caller="planner") as client:
            assert client.url == a.url  # a caller starts at the first it is given
            assert await client.call("echo.run", {"x": 1}, timeout=5) == {"x": 1}
            await a.stop()
            await wait_until(lambda: client.url == b.url and client._connected.is_set(), 5)
            assert await client.call("echo.run", {"x": 2}, timeout=5) == {"x": 2}
            handle = await client.submit("echo.run", {"x": 4})
            assert await handle.result(timeout=5) == {"x": 4}
            assert (await handle.status())["state"] == "succeeded"
    assert moves(caplog) == [f"client planner: coordinator {a.url} lost, moved to {b.url}"]


async def test_a_submit_not_yet_acknowledged_goes_to_the_next_coordinator_under_its_key(
        quick: None) -> None:
    async def drops(peer: fakecoord.Peer) -> None:
        await peer.recv()
        await peer.send(type="welcome", role="caller")
        await peer.recv()  # the submit: lost with this coordinator
        await peer.ws.close()

    async def answers(peer: fakecoord.Peer) -> None:
        await peer.recv()
        await peer.send(type="welcome", role="caller")
        submit = await peer.recv()
        await peer.send(type="accepted", id=submit["id"], task_id="t1", trace_id="t1")
        await peer.send(type="result", id=submit["id"], task_id="t1", result="done")
        while True:
            await peer.recv()

    async with fakecoord.FakeCoordinator(drops) as first, \
            fakecoord.FakeCoordinator(answers) as second:
        async with Client.connect([first.url, second.url]) as client:
            handle = await client.submit("report.make", {"q": 1})
            assert client.url == second.url and await handle.result(timeout=2) == "done"
        # the very same frame, idempotency key included, went to the other coordinator
        assert second.peers[0].raw[1] == first.peers[0].raw[1]
        assert len(first.peers) == 1  # and the one that dropped it was not dialled again


async def test_the_lost_coordinator_is_tried_last_in_the_next_round() -> None:
    urls = [f"ws://127.0.0.1:{port}" for port in (7001, 7002, 7003)]
    endpoints = Endpoints(urls)
    first = await endpoints.round([])
    assert [t.url for t in first] == urls
    assert endpoints.connected(first[0]) is None  # the first connection is not a move
    assert endpoints.connected(first[0]) is None  # back on the same one: not a move either
    after = await endpoints.round([])
    assert [t.url for t in after] == urls[1:] + urls[:1]
    assert endpoints.connected(after[0]) == first[0]  # a move: says where from
    assert [t.url for t in await endpoints.round([])] == urls[2:] + urls[:2]


async def test_a_dead_first_url_is_skipped_at_connect(pair: tuple[Reach, Reach]) -> None:
    _, b = pair
    dead = dead_url()
    agent = echo_agent()
    async with agent.connect([dead, b.url]), \
            Client.connect([dead, b.url], caller="planner") as client:
        assert agent.url == b.url and client.url == b.url
        assert await client.call("echo.run", {"x": 5}, timeout=5) == {"x": 5}


async def test_every_coordinator_down_at_connect_names_them_all() -> None:
    first, second = dead_url(), dead_url()
    for opening in (Client.connect([first, second]), echo_agent().connect([first, second])):
        with pytest.raises(Unavailable, match="no coordinator reachable of 2 given: cannot "
                                              "reach a coordinator at ") as err:
            await opening
        assert first in err.value.message and second in err.value.message
        assert err.value.details == {"urls": [first, second]}


async def test_every_coordinator_gone_the_client_gives_up_after_reconnect_for(
        pair: tuple[Reach, Reach], quick: None) -> None:
    a, b = pair
    gate = asyncio.Event()  # holds the task at the agent, so it is open when both go
    agent = Agent("slow", reconnect_base=0.005, reconnect_cap=0.02)
    agent.capability("slow.run", idempotent=True)(gate.wait)
    client = await Client.connect([a.url, b.url], reconnect_for=0.2)
    try:
        async with agent.connect(a.url):
            handle = await client.submit("slow.run")
            await b.stop()
            await a.stop()  # gives up on the task after its (short) drain
            with pytest.raises(Unavailable, match=f"coordinators at {a.url}, {b.url} "
                                                  r"unreachable for 0\.2s"):
                await handle.result(timeout=5)
            gate.set()
    finally:
        await client.close()


# ---------------------------------------------------------------- the list, checked

@pytest.mark.parametrize(("urls", "match"), [
    ([], "no coordinator URL given: pass ws://HOST:PORT, or a list of them"),
    (["ws://127.0.0.1:1", "http://127.0.0.1:8766"],
     r"'http://127\.0\.0\.1:8766' is not a websocket URL \(http:// is the REST front door's"),
    (["ws://127.0.0.1:1", "127.0.0.1:8765"], r"'127\.0\.0\.1:8765' is not a websocket URL: use"),
    (["ws://127.0.0.1:1", None], "None is not a websocket URL: use ws://HOST:PORT"),
], ids=["empty", "http", "no-scheme", "not-a-string"])
async def test_a_list_is_checked_whole_before_anything_is_dialled(
        urls: list[Any], match: str) -> None:
    for opening in (Client.connect(urls), echo_agent().connect(urls)):
        with pytest.raises(Unavailable, match=match):
            await opening


# ---------------------------------------------------------------- one name, several addresses

@pytest.fixture
async def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Names the running loop's ``getaddrinfo`` answers with these addresses (others as the
    system does): what a DNS name with several A records looks like to the SDK."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    names: dict[str, Any] = {}  # name → addresses, or the error to raise, or None: hang

    async def getaddrinfo(host: Any, port: Any, **kwargs: Any) -> Any:
        if host not in names:
            return await real(host, port, **kwargs)
        answer = names[host]
        if answer is None:
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                for address in answer]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return names


async def test_a_name_resolving_to_two_addresses_counts_as_two_coordinators(
        resolver: dict[str, Any], quick: None,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "reach.client")
    a = await Reach.start(host="127.0.0.1", **FAST)
    port = int(a.url.rsplit(":", 1)[1])
    b = await Reach.start(host="127.0.0.2", port=port, **FAST)
    resolver["coord.test"] = ["127.0.0.1", "127.0.0.2"]
    url = f"ws://coord.test:{port}"
    try:
        async with echo_agent("at-a").connect(a.url), echo_agent("at-b").connect(b.url), \
                Client.connect(url, caller="planner") as client:
            assert await client.call("echo.run", {"x": 1}, timeout=5) == {"x": 1}
            await a.stop()
            await wait_until(lambda: client._connected.is_set() and bool(moves(caplog)), 5)
            assert client.url == url  # the URL as given; the log says which address
            assert moves(caplog) == [f"client planner: coordinator {url} (at 127.0.0.1) lost, "
                                     f"moved to {url} (at 127.0.0.2)"]
            assert await client.call("echo.run", {"x": 2}, timeout=5) == {"x": 2}
    finally:
        await a.stop()
        await b.stop()


async def test_each_address_is_dialled_with_the_urls_host_name(
        resolver: dict[str, Any]) -> None:
    hosts: list[str] = []

    async def welcome(ws: ServerConnection) -> None:
        assert ws.request is not None
        hosts.append(ws.request.headers["Host"])
        await ws.recv()
        await ws.send('{"v": 1, "type": "welcome", "role": "caller"}')
        await ws.wait_closed()

    async with serve(welcome, "127.0.0.2", 0) as server:
        port = server.sockets[0].getsockname()[1]
        # the first address refuses (nothing listens on 127.0.0.3): the second is tried
        resolver["coord.test"] = ["127.0.0.3", "127.0.0.2"]
        async with Client.connect(f"ws://coord.test:{port}") as client:
            assert client.url == f"ws://coord.test:{port}"
        assert hosts == [f"coord.test:{port}"]


@pytest.mark.parametrize(("answer", "match"), [
    ([], r"'nosuch\.test' resolves to no address"),
    (socket.gaierror(-2, "Name or service not known"), r"\[Errno -2\] Name or service not"),
    (None, r"resolving 'nosuch\.test' took over 0\.05 s"),
], ids=["no-address", "unknown-name", "resolver-hangs"])
async def test_a_name_that_does_not_resolve_is_an_unreachable_coordinator(
        resolver: dict[str, Any], monkeypatch: pytest.MonkeyPatch, pair: tuple[Reach, Reach],
        answer: Any, match: str) -> None:
    monkeypatch.setattr(endpoints_mod, "RESOLVE_TIMEOUT", 0.05)
    resolver["nosuch.test"] = answer
    url = "ws://nosuch.test:8765"
    with pytest.raises(Unavailable, match=f"cannot reach a coordinator at {url}: {match}"):
        await Client.connect(url)
    # in a list, the next coordinator is tried
    async with Client.connect([url, pair[1].url]) as client:
        assert client.url == pair[1].url


async def test_a_name_behind_a_proxy_is_left_to_the_proxy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ws_proxy", "http://127.0.0.1:3128")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    targets = await Endpoints(["ws://coord.test:8765"]).round([])
    assert [(t.url, t.address) for t in targets] == [("ws://coord.test:8765", None)]
    assert str(targets[0]) == "ws://coord.test:8765"
