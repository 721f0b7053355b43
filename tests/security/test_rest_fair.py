"""Issue 25, item 9: the REST door's request cap is shared fairly between callers.

Before: the cap (``max_connections`` requests being answered) was global, so one caller
holding SSE streams and long polls made every other HTTP caller's call 503. Now a caller may
hold at most ``max_connections // (n + 1)`` requests at once, ``n`` the callers holding some
(itself included): a share is always left for one more caller. Past its share a caller is
429 ``rejected``, and the others still get in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio
from security.conftest import start_probe

from reach.testing import Cluster

CAP = 8  # max_connections: one caller alone may hold 4


@pytest_asyncio.fixture
async def door() -> AsyncIterator[tuple[Cluster, asyncio.Event, aiohttp.ClientSession]]:
    cluster = await Cluster.start(max_connections=CAP)
    release = asyncio.Event()

    async def hold() -> str:
        await release.wait()
        return "released"

    try:
        await start_probe(cluster)
        await cluster.add_agent("holder", {"hold.run": hold})
        async with aiohttp.ClientSession() as http:
            yield cluster, release, http
    finally:
        release.set()
        await cluster.close()


async def status_of(http: aiohttp.ClientSession, method: str, url: str, caller: str,
                    **kw: Any) -> tuple[int, Any]:
    async with http.request(method, url, headers={"X-Reach-Caller": caller}, **kw) as r:
        return r.status, await r.json(content_type=None)


async def first(tasks: list[asyncio.Future[Any]], n: int, timeout: float
                ) -> list[asyncio.Future[Any]]:
    """The first ``n`` of ``tasks`` to finish, or those finished within ``timeout``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while sum(t.done() for t in tasks) < n:
                await asyncio.wait([t for t in tasks if not t.done()],
                                   return_when=asyncio.FIRST_COMPLETED)
    return [t for t in tasks if t.done()]


async def test_one_callers_streams_and_long_polls_do_not_lock_out_the_others(
        door: tuple[Cluster, asyncio.Event, aiohttp.ClientSession]) -> None:
    cluster, release, http = door
    url = cluster.reach.http_url
    assert url is not None
    status, accepted = await status_of(http, "POST", url + "/v1/tasks", "hog",
                                       json={"capability": "hold.run", "params": {}})
    assert status == 202
    task = url + accepted["status_url"]
    # The hog opens two SSE streams (answered at once: they hold their slots open) ...
    streams = [await http.get(task + "/stream", headers={"X-Reach-Caller": "hog"})
               for _ in range(2)]
    assert [r.status for r in streams] == [200, 200]
    # ... and six long polls: two fit in its share of four, four are refused at once.
    polls = [asyncio.ensure_future(status_of(http, "GET", task + "?wait=30", "hog"))
             for _ in range(6)]
    done = await first(polls, 4, timeout=2.0)
    answers = [p.result() for p in done]
    assert len(answers) == 4 and all(s == 429 for s, _ in answers), answers
    assert all(body["code"] == "rejected" and "its share" in body["detail"]
               for _, body in answers)
    # Another caller still gets in, and may hold requests of its own.
    status, body = await status_of(http, "POST", url + "/v1/call/probe.echo", "alice",
                                   json={"n": 5})
    assert (status, body["result"]) == (200, 5)
    status, mine = await status_of(http, "POST", url + "/v1/tasks", "alice",
                                   json={"capability": "hold.run", "params": {}})
    assert status == 202
    alice = asyncio.ensure_future(status_of(http, "GET", url + mine["status_url"] + "?wait=30",
                                            "alice"))
    await asyncio.sleep(0.05)
    status, body = await status_of(http, "POST", url + "/v1/call/probe.echo", "bob",
                                   json={"n": 6})
    assert (status, body["result"]) == (200, 6)
    assert not alice.done()  # alice's long poll holds its slot beside the hog's four
    # When the task ends every held request is answered, and the shares are free again.
    release.set()
    for poll in polls:
        if poll not in done:
            status, view = await poll
            assert (status, view["state"]) == (200, "succeeded")
    assert (await alice)[0] == 200
    for r in streams:
        text = await r.text()
        assert "event: result" in text
        r.close()
    status, _ = await status_of(http, "POST", url + "/v1/call/probe.echo", "hog",
                                json={"n": 7})
    assert status == 200


async def test_a_caller_that_leaves_gives_its_slots_back_at_once(
        door: tuple[Cluster, asyncio.Event, aiohttp.ClientSession]) -> None:
    """Long polls whose caller hung up are not answered to anyone: they end with the
    connection (before, each kept its slot up to its ``wait``, 30 s here, with no connection
    left for the connection cap to count)."""
    cluster, _, http = door
    url = cluster.reach.http_url
    assert url is not None
    status, accepted = await status_of(http, "POST", url + "/v1/tasks", "hog",
                                       json={"capability": "hold.run", "params": {}})
    assert status == 202
    task = url + accepted["status_url"]
    for _ in range(3):  # each round the hog fills its share, then hangs up on all of it
        async with aiohttp.ClientSession() as hog:
            polls = [asyncio.ensure_future(status_of(hog, "GET", task + "?wait=30", "hog"))
                     for _ in range(CAP // 2)]
            await asyncio.sleep(0.05)
            assert not any(p.done() for p in polls), [p.result() for p in polls if p.done()]
            for p in polls:
                p.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
        await asyncio.sleep(0.05)  # (the coordinator sees the connections close)
    status, body = await status_of(http, "GET", task + "?wait=0", "hog")
    assert (status, body["state"]) == (200, "running"), body
