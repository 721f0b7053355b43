"""The caller SDK's failure paths against a coordinator played by the test (issue 17): a
handshake that goes wrong, a coordinator that goes away for good or comes back, waits that time
out on the client's side, back-pressure, and frames nobody waits for.

The fake is a websockets server on loopback whose every connection runs a script; it sees
exactly what the client sends, so each test checks both what the caller gets and what went on
the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import fakecoord
import pytest

from reach import Client, Handle
from reach.core.backoff import Backoff
from reach.errors import (
    ProtocolError,
    ReachTimeout,
    Rejected,
    TaskFailed,
    Unauthorized,
    Unavailable,
)
from reach.sdk import client as client_mod
from reach.sdk import connection
from reach.testing import wait_until

Script = Callable[["Peer"], Awaitable[None]]


class Peer(fakecoord.Peer):
    """One caller connection to the fake coordinator, as its script sees it."""

    async def welcome(self, **extra: Any) -> dict[str, Any]:
        hello = await self.recv()
        await self.send(type="welcome", role="caller", **extra)
        return hello

    async def accept(self, task_id: str = "t1") -> dict[str, Any]:
        """Take the next submit and acknowledge it; returns the submit."""
        submit = await self.recv()
        assert submit["type"] == "submit"
        await self.send(type="accepted", id=submit["id"], task_id=task_id, trace_id=task_id)
        return submit

    async def hold(self) -> None:
        """Keep the connection open, reading (and recording) until the client closes it."""
        while True:
            await self.recv()


class FakeCoordinator(fakecoord.FakeCoordinator):
    peer = Peer


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"ws://127.0.0.1:{port}"  # nothing listens there any more


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond reconnects, so a reconnect (or giving up) comes within the test."""
    monkeypatch.setattr(client_mod, "RECONNECT", Backoff(0.005, 2.0, 0.02, jitter=0.0))


@pytest.fixture
def impatient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A coordinator gets 0.25 s, not 10 s, to answer the first frame."""
    monkeypatch.setattr(connection, "ANSWER_TIMEOUT", 0.25)


async def until_got(peer: Peer, kind: str) -> dict[str, Any]:
    await wait_until(lambda: any(f["type"] == kind for f in peer.got))
    return next(f for f in peer.got if f["type"] == kind)


# ---------------------------------------------------------------- opening the connection

async def test_no_coordinator_listening_is_unavailable() -> None:
    url = dead_url()
    with pytest.raises(Unavailable, match="is it running") as err:
        await Client.connect(url, caller="planner")
    assert url in err.value.message


async def _silent(peer: Peer) -> None:
    await peer.hold()


async def _hangs_up(peer: Peer) -> None:
    await peer.recv()
    await peer.ws.close()


async def _answers_accepted(peer: Peer) -> None:
    await peer.recv()
    await peer.send(type="accepted", id=1, task_id="t", trace_id="t")
    await peer.hold()


async def _answers_garbage(peer: Peer) -> None:
    await peer.recv()
    await peer.ws.send("this is not a frame")
    await peer.hold()


async def _refuses(peer: Peer) -> None:
    await peer.recv()
    await peer.send(type="error", error={"code": "unauthorized", "message": "bad token"})
    await peer.hold()


@pytest.mark.parametrize(("script", "error", "match"), [
    (_silent, Unavailable, "did not answer 'hello' in 0.25 s"),
    (_hangs_up, Unavailable, "closed the connection"),
    (_answers_accepted, ProtocolError, "expected 'welcome', got 'accepted'"),
    (_answers_garbage, ProtocolError, "frame is not valid JSON"),
    (_refuses, Unauthorized, "bad token"),
], ids=["never-answers", "closes", "not-welcome", "garbage", "refuses"])
async def test_a_handshake_that_goes_wrong_raises_and_leaves_no_connection(
        impatient: None, script: Script, error: type[Exception], match: str) -> None:
    async with FakeCoordinator(script) as fake:
        with pytest.raises(error, match=match):
            await Client.connect(fake.url, caller="planner", token="tok")
        peer = fake.peers[0]
        assert peer.got[0] == {"v": 1, "type": "hello", "caller": "planner", "token": "tok"}
        await asyncio.wait_for(peer.done.wait(), 2)  # the client closed its side


# ---------------------------------------------------------------- losing the coordinator

async def test_reconnect_gives_up_and_fails_every_wait(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        await peer.accept("t1")            # a plain submit
        await peer.accept("t2")            # a stream
        await peer.hold()                  # a status request: never answered

    async with FakeCoordinator(script) as fake:
        client = await Client.connect(fake.url, reconnect_for=0.1)
        handle = await client.submit("report.make")
        stream = client.stream("rows.read")
        first = asyncio.ensure_future(anext(stream))
        status = asyncio.ensure_future(client.status("t1"))
        await until_got(fake.peers[0], "status")
        await fake.stop()                  # gone, and nothing listens any more

        with pytest.raises(Unavailable, match="connection to the coordinator was lost"):
            await status                   # not a task: failed at once, not carried over
        with pytest.raises(Unavailable, match=r"unreachable for 0\.1s") as gave_up:
            await handle.result()
        assert fake.url in gave_up.value.message
        with pytest.raises(Unavailable, match=r"unreachable for 0\.1s"):
            await first
        # still not connected: a new request waits out reconnect_for, then says so
        with pytest.raises(Unavailable, match=f"not connected to {fake.url}"):
            await client.status("t1")
        assert (client._requests, client._outcomes, client._submits) == ({}, {}, {})
        await client.close()


async def test_an_unacknowledged_submit_goes_again_under_the_same_key(quick: None) -> None:
    async def drops(peer: Peer) -> None:
        await peer.welcome()
        await peer.recv()                  # the submit: lost with the connection
        await peer.ws.close()

    async def answers(peer: Peer) -> None:
        await peer.welcome()
        submit = await peer.accept("t7")
        await peer.send(type="result", id=submit["id"], task_id="t7", result={"n": 7})
        await peer.hold()

    async with FakeCoordinator(drops, answers) as fake:
        async with Client.connect(fake.url) as client:
            handle = await client.submit("report.make", {"q": 1})
            assert handle.task_id == "t7"
            assert await handle.result(timeout=2) == {"n": 7}
        # the very same frame (id, idempotency key made up by the client) was sent again
        assert fake.peers[1].raw[1] == fake.peers[0].raw[1]
        assert fake.peers[0].got[1]["idempotency_key"]


async def test_an_accepted_task_is_asked_for_again_after_a_reconnect(quick: None) -> None:
    async def accepts_then_drops(peer: Peer) -> None:
        await peer.welcome()
        await peer.accept("t9")
        await peer.ws.close()

    async def answers_the_ask(peer: Peer) -> None:
        await peer.welcome()
        ask = await peer.recv()
        await peer.send(type="result", id=ask["id"], task_id=ask["task_id"], result="done")
        await peer.hold()

    async with FakeCoordinator(accepts_then_drops, answers_the_ask) as fake:
        async with Client.connect(fake.url) as client:
            handle = await client.submit("report.make")
            assert await handle.result(timeout=2) == "done"
        submit_id = fake.peers[0].got[1]["id"]
        assert fake.peers[1].got[1] == {"v": 1, "type": "result", "task_id": "t9",
                                        "attempt": 0, "id": submit_id}


# ---------------------------------------------------------------- waits on the client's side

async def test_a_handle_wait_that_times_out_keeps_the_task_tracked(quick: None) -> None:
    release = asyncio.Event()

    async def script(peer: Peer) -> None:
        await peer.welcome()
        submit = await peer.accept("t3")
        status = await peer.recv()
        await peer.send(type="task", id=status["id"], task={"task_id": "t3", "state": "running"})
        await release.wait()
        await peer.send(type="result", id=submit["id"], task_id="t3", result=[1, 2])
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        handle = await client.submit("slow.job")
        assert repr(handle) == "Handle(task_id='t3', trace_id='t3')"
        with pytest.raises(ReachTimeout, match="still tracked") as late:
            await handle.result(timeout=0.02)
        assert late.value.details == {"task_id": "t3"}
        assert await handle.status() == {"task_id": "t3", "state": "running"}
        release.set()
        assert await handle.result(timeout=2) == [1, 2]  # the same outcome, awaited again


async def test_a_handle_without_an_outcome_subscribes_when_awaited(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        ask = await peer.recv()
        await peer.send(type="result", id=ask["id"], task_id=ask["task_id"], result="old")
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        handle = Handle(client, "t-before-restart", "", False, None)
        assert await handle.result(timeout=2) == "old"
        assert fake.peers[0].got[1]["type"] == "result"
        assert fake.peers[0].got[1]["task_id"] == "t-before-restart"


async def test_a_call_past_its_timeout_and_grace_raises_reach_timeout(
        quick: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_mod, "OUTCOME_GRACE", 0.0)
    async with FakeCoordinator(_welcome_and_hold) as fake:
        async with Client.connect(fake.url) as client:
            with pytest.raises(ReachTimeout, match=r"'slow\.job' gave no outcome within 0\.02s"
                               ) as late:
                await client.call("slow.job", timeout=0.02)
            assert late.value.details == {"capability": "slow.job"}
            assert (client._outcomes, client._submits) == ({}, {})  # nothing left behind
        submit = fake.peers[0].got[1]
        assert (submit["type"], submit["timeout"], submit["defer_ack"]) == ("submit", 0.02, True)


async def _welcome_and_hold(peer: Peer) -> None:
    await peer.welcome()
    await peer.hold()


async def test_a_request_given_up_by_its_caller_leaves_nothing_behind(quick: None) -> None:
    async with FakeCoordinator(_welcome_and_hold) as fake:
        async with Client.connect(fake.url) as client:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.status("t1"), 0.02)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.submit("slow.job"), 0.02)
            # neither waiter stays registered (they used to, one per abandoned request)
            assert (client._requests, client._outcomes, client._submits) == ({}, {}, {})


async def test_a_client_that_never_connected_says_so_after_reconnect_for() -> None:
    client = Client(dead_url(), reconnect_for=0.02)
    with pytest.raises(Unavailable, match="not connected to ws://127.0.0.1:"):
        await client.status("t1")
    await client.close()  # nothing to close: no error


# ---------------------------------------------------------------- back-pressure

async def test_after_rejected_the_next_submit_waits_then_eases_off(quick: None) -> None:
    arrived: list[float] = []

    async def script(peer: Peer) -> None:
        await peer.welcome()
        submit = await peer.recv()
        await peer.send(type="error", id=submit["id"], error={
            "code": "rejected", "message": "saturated", "details": {"level": 1.0}})
        submit = await peer.recv()
        arrived.append(asyncio.get_running_loop().time())
        await peer.send(type="accepted", id=submit["id"], task_id="t2", trace_id="t2")
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        with pytest.raises(Rejected) as rejected:
            await client.submit("busy.job")
        assert rejected.value.level == 1.0
        delay, until = client._pacer.delay, client._pacer.until
        assert delay > 0 and client._pacer.wait(asyncio.get_running_loop().time()) > 0
        handle = await client.submit("busy.job")
        assert handle.task_id == "t2"
        assert arrived[0] >= until  # held back until the pacer's deadline, not sent at once
        assert client._pacer.delay == pytest.approx(delay / 2)  # accepted: halved


# ---------------------------------------------------------------- frames and closing

async def test_frames_nobody_waits_for_are_ignored(
        quick: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reach.client")

    async def script(peer: Peer) -> None:
        await peer.welcome()
        await peer.ws.send("{not json")
        await peer.send(type="accepted", id=901, task_id="x1", trace_id="x1")
        await peer.send(type="result", id=902, task_id="x2", trace_id="x2", result=1)
        await peer.send(type="error", id=903, error={"code": "task_failed", "message": "x"})
        await peer.send(type="chunk", id=904, task_id="x4", data="c")
        await peer.send(type="welcome", role="caller")
        await peer.send(type="error", error={"code": "protocol_error", "message": "slow down"})
        status = await peer.recv()
        await peer.send(type="task", id=status["id"], task={"task_id": "t1"})
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        assert await client.status("t1") == {"task_id": "t1"}  # the connection still works
    warnings = [r.getMessage() for r in caplog.records if r.name == "reach.client"]
    assert warnings == ["ignoring a malformed frame from the coordinator",
                        "coordinator reports: slow down"]


async def test_a_stream_ends_with_the_error_its_task_failed_with(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        first = await peer.accept("s1")
        await peer.send(type="chunk", id=first["id"], task_id="s1", data="a")
        await peer.send(type="error", id=first["id"], task_id="s1", trace_id="s1",
                        error={"code": "task_failed", "message": "disk on fire"})
        second = await peer.accept("s2")
        await peer.send(type="chunk", id=second["id"], task_id="s2", data="b")
        await peer.send(type="result", id=second["id"], task_id="s2", trace_id="s2",
                        result="summary, not the chunks")
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        got: list[Any] = []
        with pytest.raises(TaskFailed, match="disk on fire"):
            async for chunk in client.stream("rows.read"):
                got.append(chunk)
        assert got == ["a"]
        # a final result that is not the list of chunks adds none: the stream just ends
        assert [c async for c in client.stream("rows.read")] == ["b"]
        assert client._streams == {}


async def test_close_fails_what_still_waits(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        await peer.accept("t1")
        await peer.accept("t2")
        await peer.hold()

    async with FakeCoordinator(script) as fake:
        client = await Client.connect(fake.url)
        handle = await client.submit("report.make")
        stream = client.stream("rows.read")
        first = asyncio.ensure_future(anext(stream))
        status = asyncio.ensure_future(client.status("t1"))
        await until_got(fake.peers[0], "status")
        await client.close()
        for waiting in (status, first, handle.result()):
            with pytest.raises(Unavailable, match="client closed"):
                await waiting
        await asyncio.wait_for(fake.peers[0].done.wait(), 2)


async def test_a_client_used_as_a_context_manager_closes_on_exit(quick: None) -> None:
    async with FakeCoordinator(_welcome_and_hold) as fake:
        async with await Client.connect(fake.url) as client:
            assert client.frame_limit == 1 << 20
        await asyncio.wait_for(fake.peers[0].done.wait(), 2)
        with pytest.raises(Unavailable, match="not connected"):
            await client.status("t1")


async def test_close_during_a_reconnect_stops_it(quick: None) -> None:
    async def drops(peer: Peer) -> None:
        await peer.welcome()
        await peer.accept("t1")
        await peer.ws.close()

    async with FakeCoordinator(drops, _silent) as fake:
        client = await Client.connect(fake.url)
        handle = await client.submit("report.make")
        await wait_until(lambda: len(fake.peers) == 2 and bool(fake.peers[1].got))
        await client.close()               # while the reconnect waits for its welcome
        with pytest.raises(Unavailable, match="client closed"):
            await handle.result()
        await asyncio.wait_for(fake.peers[1].done.wait(), 2)  # that connection closed too


# ---------------------------------------------------------------- an answer racing a cancel

async def test_an_answer_for_a_waiter_cancelled_in_the_same_turn_is_dropped(
        quick: None) -> None:
    """The caller's cancel lands first; the answer that arrives before its waiter has run
    again must not be set on the cancelled future (InvalidStateError in the reader)."""
    async with FakeCoordinator(_welcome_and_hold) as fake:
        async with Client.connect(fake.url) as client:
            status = asyncio.ensure_future(client.status("t1"))
            submit = asyncio.ensure_future(client.submit("report.make"))
            plain = asyncio.ensure_future(client.status("t2"))
            await wait_until(lambda: len(client._requests) == 3)
            ids = sorted(client._requests)
            for waiter in (status, submit, plain):
                waiter.cancel()
            client._on_frame(json.dumps({"v": 1, "type": "task", "id": ids[0], "task": {}}))
            client._on_frame(json.dumps({"v": 1, "type": "result", "id": ids[1],
                                         "task_id": "t5", "trace_id": "t5", "result": 1}))
            client._on_frame(json.dumps({"v": 1, "type": "error", "id": ids[2], "error": {
                "code": "task_failed", "message": "late"}}))
            for waiter in (status, submit, plain):
                with pytest.raises(asyncio.CancelledError):
                    await waiter
            assert client._requests == {}


async def test_close_racing_a_cancelled_call_fails_only_live_waiters(quick: None) -> None:
    async with FakeCoordinator(_welcome_and_hold) as fake:
        client = await Client.connect(fake.url)
        call = asyncio.ensure_future(client.call("slow.job"))
        status = asyncio.ensure_future(client.status("t1"))
        other = asyncio.ensure_future(client.status("t2"))
        await wait_until(lambda: len(client._outcomes) == 1 and len(client._requests) == 2)
        call.cancel()
        status.cancel()
        client._fail_all(Unavailable("client closed"))  # what close() does, in the same turn
        for cancelled in (call, status):
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        with pytest.raises(Unavailable, match="client closed"):
            await other
        await client.close()


async def test_an_outcome_carrying_trace_id_also_acknowledges_the_submit(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        submit = await peer.recv()  # answered at once: no separate `accepted`
        await peer.send(type="result", id=submit["id"], task_id="t4", trace_id="tr4",
                        result={"ok": True})
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        handle = await client.submit("quick.read")
        assert (handle.task_id, handle.trace_id, handle.duplicate) == ("t4", "tr4", False)
        assert await handle.result(timeout=2) == {"ok": True}


async def test_call_intent_sends_the_words_and_returns_the_outcome(quick: None) -> None:
    async def script(peer: Peer) -> None:
        await peer.welcome()
        submit = await peer.accept("t6")
        await peer.send(type="result", id=submit["id"], task_id="t6", result=["east", 3])
        await peer.hold()

    async with FakeCoordinator(script) as fake, Client.connect(fake.url) as client:
        assert await client.call_intent("查询华东区销量", {"q": 3}, timeout=2) == ["east", 3]
        submit = fake.peers[0].got[1]
        assert (submit["capability"], submit["intent"], submit["timeout"]) == (
            "", "查询华东区销量", 2)
