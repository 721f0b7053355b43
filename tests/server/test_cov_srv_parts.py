"""Small parts of reach/server with behaviour of their own: the SSE chunk store's bounds and
its pump (overflow, keepalive), the connection cap inside the channel, a refusal to a peer that
already left, notebook renderings of nothing, and the front door's problem titles and OpenAPI
parameter schemas."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
import websockets

from reach import Reach
from reach.server import front_sse
from reach.server.channel import TRY_AGAIN_LATER
from reach.server.display import AgentList, timeline_html
from reach.server.front_openapi import _not_null
from reach.server.front_problems import _title


class Written:
    """A stand-in for an aiohttp StreamResponse: what ``pump`` wrote, in order."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.parts.append(data)


# ---------------------------------------------------------------- front_sse


def test_a_reader_that_falls_behind_is_marked_overflowed_not_grown() -> None:
    reader = front_sse.Reader([], limit=10)
    reader.push(1, b"12345678")
    reader.push(2, b"12345")  # 13 > 10: not kept
    assert reader.overflowed and reader.items == type(reader.items)([(1, b"12345678")])
    assert reader.size == 8 and reader.wake.is_set()


async def test_pump_ends_an_overflowed_stream_with_a_429_event() -> None:
    reader = front_sse.Reader([], limit=4)
    reader.push(1, b'"ab"')
    reader.push(2, b'"too long"')
    outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    out = Written()
    await front_sse.pump(out, reader, outcome, lambda: b"final")  # type: ignore[arg-type]
    assert out.parts[0] == b'id: 1\nevent: chunk\ndata: "ab"\n\n'
    assert out.parts[1].startswith(b"event: error\ndata: ")
    problem = json.loads(out.parts[1].split(b"data: ", 1)[1])
    assert problem["status"] == 429 and problem["code"] == "rejected"
    assert "fell too far behind" in problem["detail"]
    assert len(out.parts) == 2 and not outcome.done()  # no final event: the task goes on


async def test_pump_sends_keepalives_while_the_task_is_quiet() -> None:
    reader = front_sse.Reader([], limit=100)
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()
    out = Written()
    loop.call_later(0.05, outcome.set_result, None)
    await front_sse.pump(out, reader, outcome, lambda: b"final", keepalive=0.01)  # type: ignore[arg-type]
    assert out.parts[-1] == b"final"
    keepalives = out.parts[:-1]
    assert keepalives and set(keepalives) == {b": keepalive\n\n"}


def test_finished_logs_are_forgotten_first_when_over_the_total() -> None:
    chunks = front_sse.Chunks(per_task=100, total=10)
    for tid in ("a", "b", "c"):
        chunks.sink(tid, 1, "xx")  # 4 bytes each as JSON
        chunks.finished(tid)
    held = chunks.follow("d")  # unfinished with a reader
    chunks.sink("d", 1, "yy")
    # Over 10 bytes: finished logs without readers go, oldest first, until under the bound.
    assert not chunks.has("a") and chunks.has("d") and chunks.kept("d") == 1
    assert chunks._size <= 10
    chunks.leave("d", held)
    chunks.leave("d", held)  # leaving twice, or a log already gone, is harmless
    chunks.leave("nobody", held)
    assert chunks.has("d")


def test_finished_logs_go_one_after_another_until_under_the_total() -> None:
    chunks = front_sse.Chunks(per_task=100, total=10)
    for tid in ("a", "b"):
        chunks.sink(tid, 1, "x")  # 3 bytes each as JSON
        chunks.finished(tid)
    chunks.sink("c", 1, "xxxxxxxx")  # 10 bytes: 16 in all, and forgetting "a" is not enough
    assert (chunks.has("a"), chunks.has("b"), chunks.has("c")) == (False, False, True)
    assert chunks._size == 10


def test_past_the_log_count_unfinished_logs_go_too() -> None:
    chunks = front_sse.Chunks(per_task=100, total=1000, max_logs=2)
    for tid in ("a", "b", "c"):
        chunks.sink(tid, 1, tid)  # none finished
    assert [t for t in ("a", "b", "c") if chunks.has(t)] == ["b", "c"]


# ---------------------------------------------------------------- channel and session


async def test_a_connection_over_the_cap_inside_the_channel_is_closed_1013() -> None:
    """The HTTP step refuses most connections over ``max_connections``; one that got past it
    (two handshakes at once) is closed by the channel with 1013 (try again later) when its
    first frame would make one session too many. (The cap is now counted in sessions that
    said who they are, so the stand-in connection sends a hello.)"""
    async with Reach.start(http_port=None, max_connections=1) as reach:
        closed: list[tuple[int, str]] = []

        class Late:
            remote_address = ("127.0.0.1", 1)

            async def recv(self) -> str:
                return json.dumps({"v": 1, "type": "hello", "caller": "late"})

            async def close(self, code: int, reason: str) -> None:
                closed.append((code, reason))

        held = await websockets.connect(reach.url)  # the one session the cap allows
        await held.send(json.dumps({"v": 1, "type": "hello", "caller": "first"}))
        await held.recv()
        assert reach.channel.full
        await reach.channel.handle(Late())  # type: ignore[arg-type]
        assert closed == [(TRY_AGAIN_LATER, "the coordinator is at its connection limit")]
        assert reach.channel.open == 1  # counted out again
        await held.close()
        assert reach.channel.lag >= 0.0


async def test_a_refusal_to_a_peer_that_already_left_is_dropped_quietly(
        caplog: pytest.LogCaptureFixture) -> None:
    async with Reach.start(http_port=None) as reach:
        ws = await websockets.connect(reach.url)
        # A first frame the coordinator refuses, and the close right behind it.
        await ws.send(json.dumps({"v": 1, "type": "heartbeat"}))
        await ws.close()
        async with asyncio.timeout(2):
            while reach.channel.open:
                await asyncio.sleep(0.005)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        async with websockets.connect(reach.url) as ok:  # the coordinator carries on
            await ok.send(json.dumps({"v": 1, "type": "hello", "caller": "c"}))
            assert json.loads(await ok.recv())["type"] == "welcome"


# ---------------------------------------------------------------- display


async def test_notebook_views_of_nothing_say_so() -> None:
    async with Reach.start(http_port=None) as reach:
        assert reach.agents()._repr_html_() == "<p><i>no agents connected</i></p>"
        assert "no agents connected" in reach._repr_html_()
    assert AgentList()._repr_html_() == "<p><i>no agents connected</i></p>"
    assert timeline_html({"trace_id": "<t&1>", "hops": [], "tasks": []}) == \
        "<p><i>no tasks in trace &lt;t&amp;1&gt;</i></p>"


# ---------------------------------------------------------------- front door helpers


@pytest.mark.parametrize(("status", "title"), [(404, "Not Found"), (429, "Too Many Requests"),
                                               (599, "Error")])
def test_a_problem_title_is_the_status_phrase_or_error(status: int, title: str) -> None:
    assert _title(status) == title


def test_an_optional_parameter_schema_loses_only_its_null_branch() -> None:
    one = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "N"}
    assert _not_null(one) == {"type": "integer", "title": "N"}
    two = {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}],
           "default": None}
    assert _not_null(two) == {"anyOf": two["anyOf"]}  # a real union stays a union
    assert _not_null({"type": "string", "default": "x"}) == {"type": "string"}
