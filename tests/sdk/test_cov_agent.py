"""The agent SDK's failure paths against a coordinator played by the test (issue 17): the first
connection failing, refusals after it, invokes while closing, a cancelled handler's reply, the
bounded idempotency cache, results JSON cannot carry, and frames the agent has no use for.

The fake coordinator is a websockets server on loopback: it registers the agent, sends it the
invokes a test asks for and records every frame the agent sends back.
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
from pydantic import BaseModel

from reach import Agent
from reach.errors import ProtocolError, ReachError, Unauthorized, Unavailable
from reach.sdk import connection, endpoints
from reach.sdk.context import Context
from reach.testing import wait_until

Script = Callable[["Peer"], Awaitable[None]]


class Peer(fakecoord.Peer):
    """One agent connection as the fake coordinator sees it."""

    async def welcome(self, **extra: Any) -> dict[str, Any]:
        register = await self.recv()
        await self.send(type="welcome", role="agent", agent_id="a-1", **extra)
        return register

    async def read(self) -> None:
        """Record the agent's frames until it closes the connection."""
        async for raw in self.ws:
            self.got.append(json.loads(raw))

    async def invoke(self, task_id: str, capability: str = "echo", key: str | None = None,
                     **params: Any) -> None:
        await self.send(type="invoke", task_id=task_id, attempt=1, capability=capability,
                        params=params, idempotency_key=key or f"k-{task_id}",
                        trace_id=task_id, caller="planner")

    async def answer(self, task_id: str) -> dict[str, Any]:
        """The ``result`` or ``error`` the agent sends for ``task_id`` (read() records it)."""
        def answered() -> bool:
            return any(f.get("task_id") == task_id and f["type"] in ("result", "error")
                       for f in self.got)
        await wait_until(answered)
        return next(f for f in self.got
                    if f.get("task_id") == task_id and f["type"] in ("result", "error"))


class FakeCoordinator(fakecoord.FakeCoordinator):
    peer = Peer


async def serves(peer: Peer) -> None:
    await peer.welcome()
    await peer.read()


async def drops(peer: Peer) -> None:
    await peer.welcome()
    await peer.ws.close()


def echo_agent(name: str = "echoer", **options: Any) -> Agent:
    agent = Agent(name, reconnect_base=0.005, reconnect_cap=0.01, **options)

    @agent.capability("echo", idempotent=True, latency_ms=10)
    async def echo(**params: Any) -> dict[str, Any]:
        return params

    return agent


async def connected(fake: FakeCoordinator, agent: Agent) -> Peer:
    await agent.connect(fake.url)
    return fake.peers[-1]  # welcomed: the agent is online


# ---------------------------------------------------------------- declaring and connecting

async def test_an_agent_refuses_a_setup_it_cannot_serve() -> None:
    with pytest.raises(ValueError, match="max_concurrency must be at least 1"):
        Agent("none", max_concurrency=0)
    with pytest.raises(ValueError, match="declares no capability"):
        await Agent("idle").connect("ws://127.0.0.1:1")
    async with FakeCoordinator(serves) as fake:
        agent = echo_agent()
        async with agent.connect(fake.url):
            with pytest.raises(RuntimeError, match="already connected"):
                await agent.connect(fake.url)
            assert agent.online.is_set()  # the first connection is untouched
        assert len(fake.peers) == 1


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


async def test_a_first_connect_to_a_dead_coordinator_raises_and_leaves_nothing_running(
        ) -> None:
    agent = echo_agent()
    url = dead_url()
    with pytest.raises(Unavailable, match="is it running") as err:
        await agent.connect(url)
    assert url in err.value.message
    assert agent._serve_task is None and not agent.online.is_set()
    async with FakeCoordinator(serves) as fake:  # and it can connect afterwards
        async with agent.connect(fake.url):
            assert agent.online.is_set() and agent.agent_id == "a-1"


async def test_a_first_connect_failing_below_the_library_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def dial(*args: Any, **kwargs: Any) -> Any:
        raise OSError("network is unreachable")

    monkeypatch.setattr(endpoints, "dial", dial)  # what dials each coordinator in turn
    with pytest.raises(Unavailable, match="cannot reach a coordinator at ws://192.0.2.7: "
                                          "network is unreachable; is it running"):
        await echo_agent().connect("ws://192.0.2.7")  # an address: nothing to resolve


async def _refuses(peer: Peer) -> None:
    peer.got.append(json.loads(await peer.ws.recv()))
    await peer.send(type="error", error={"code": "unauthorized", "message": "bad token"})
    await peer.read()


async def _answers_accepted(peer: Peer) -> None:
    peer.got.append(json.loads(await peer.ws.recv()))
    await peer.send(type="accepted", id=1, task_id="t", trace_id="t")
    await peer.read()


async def _answers_garbage(peer: Peer) -> None:
    peer.got.append(json.loads(await peer.ws.recv()))
    await peer.ws.send("[1, 2]")
    await peer.read()


async def _silent(peer: Peer) -> None:
    await peer.read()


@pytest.mark.parametrize(("script", "error", "match"), [
    (_refuses, Unauthorized, "bad token"),
    (_answers_accepted, ReachError, "expected 'welcome', got 'accepted'"),
    (_answers_garbage, ProtocolError, "JSON object"),
    (_silent, Unavailable, "did not answer 'register' in 0.25 s"),
], ids=["refuses", "not-welcome", "garbage", "silent"])
async def test_a_first_connect_answered_wrong_raises_it(
        monkeypatch: pytest.MonkeyPatch, script: Script, error: type[Exception],
        match: str) -> None:
    monkeypatch.setattr(connection, "ANSWER_TIMEOUT", 0.25)
    async with FakeCoordinator(script) as fake:
        agent = echo_agent()
        with pytest.raises(error, match=match):
            await agent.connect(fake.url)
        register = fake.peers[0].got[0]
        assert (register["type"], register["name"]) == ("register", "echoer")
        await asyncio.wait_for(fake.peers[0].done.wait(), 2)  # and hung up
        assert agent._serve_task is None and len(fake.peers) == 1


# ---------------------------------------------------------------- after the first connection

async def test_a_refusal_after_a_reconnect_stops_the_agent(
        caplog: pytest.LogCaptureFixture) -> None:
    async with FakeCoordinator(drops, _refuses) as fake:
        agent = echo_agent()
        await agent.connect(fake.url)
        assert agent._serve_task is not None
        await wait_until(agent._serve_task.done)  # serving ended: no third attempt
        assert len(fake.peers) == 2 and not agent.online.is_set()
        assert "refused by coordinator: bad token" in caplog.text
        await agent.close()


async def test_an_answer_other_than_welcome_on_a_reconnect_is_retried() -> None:
    async with FakeCoordinator(drops, _answers_accepted, serves) as fake:
        agent = echo_agent()
        async with agent.connect(fake.url):
            await wait_until(lambda: len(fake.peers) == 3 and agent.online.is_set())
            peer = fake.peers[2]
            await peer.invoke("t1", x=1)
            assert (await peer.answer("t1"))["result"] == {"x": 1}


async def test_welcome_warnings_are_kept_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def warns(peer: Peer) -> None:
        await peer.welcome(warnings=["capability 'echo' is declared by another agent too"],
                           heartbeat_interval=0.01)
        await peer.read()

    async with FakeCoordinator(warns) as fake:
        agent = echo_agent()
        async with agent.connect(fake.url):
            assert agent.warnings == ["capability 'echo' is declared by another agent too"]
            await wait_until(lambda: any(f["type"] == "heartbeat" for f in fake.peers[0].got))
    assert "echoer: capability 'echo' is declared by another agent too" in caplog.text
    beat = next(f for f in fake.peers[0].got if f["type"] == "heartbeat")
    assert (beat["inflight"], beat["queue_depth"]) == (0, 0)


# ---------------------------------------------------------------- closing

def blocking_agent(**options: Any) -> tuple[Agent, asyncio.Event, list[str]]:
    agent = Agent("blocker", **{"reconnect_base": 0.005, "reconnect_cap": 0.01, **options})
    release = asyncio.Event()
    seen: list[str] = []

    @agent.capability("hold", scope="write")
    async def hold() -> str:
        seen.append("started")
        try:
            await release.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "released"

    return agent, release, seen


async def test_an_invoke_while_closing_is_refused_so_it_can_go_elsewhere() -> None:
    async with FakeCoordinator(serves) as fake:
        agent, release, seen = blocking_agent()
        peer = await connected(fake, agent)
        await peer.invoke("t1", "hold")
        await wait_until(lambda: seen == ["started"])
        closing = asyncio.ensure_future(agent.close(drain=2))
        await wait_until(lambda: any(f["type"] == "deregister" for f in peer.got))
        await peer.invoke("t2", "hold")
        refused = await peer.answer("t2")
        assert refused == {"v": 1, "type": "error", "task_id": "t2", "attempt": 1, "error": {
            "code": "unavailable", "message": "agent 'blocker' is shutting down",
            "details": {"agent": "blocker"}}}
        release.set()                                  # the work in hand still finishes
        assert (await peer.answer("t1"))["result"] == "released"
        await closing
        assert seen == ["started"] and agent.executions == 1


async def test_a_coordinator_hanging_up_on_a_closing_agent_is_not_dialled_again() -> None:
    async def hangs_up_on_deregister(peer: Peer) -> None:
        await peer.welcome()
        async for raw in peer.ws:
            peer.got.append(json.loads(raw))
            if peer.got[-1]["type"] == "deregister":
                await peer.ws.close()

    async with FakeCoordinator(hangs_up_on_deregister) as fake:
        agent, release, seen = blocking_agent()
        peer = await connected(fake, agent)
        await peer.invoke("t1", "hold")
        await wait_until(lambda: seen == ["started"])
        closing = asyncio.ensure_future(agent.close(drain=2))
        assert agent._serve_task is not None
        await wait_until(agent._serve_task.done)       # the session ended: no reconnect
        assert not agent.online.is_set()
        release.set()
        await closing
        assert len(fake.peers) == 1


async def test_a_cancelled_handler_replies_cancelled_and_its_key_runs_again() -> None:
    async with FakeCoordinator(serves) as fake:
        agent, release, seen = blocking_agent()
        async with agent.connect(fake.url):
            peer = fake.peers[-1]
            await peer.invoke("t1", "hold", key="k")
            await wait_until(lambda: seen == ["started"])
            await peer.send(type="cancel", task_id="t1", attempt=1)
            reply = await peer.answer("t1")
            assert reply["error"] == {"code": "task_failed", "message": "cancelled",
                                      "details": {"answer": False, "agent": "blocker"}}
            assert seen == ["started", "cancelled"]
            await peer.invoke("t2", "hold", key="k")  # a cancel is no answer: not cached
            await wait_until(lambda: seen == ["started", "cancelled", "started"])
            release.set()
            assert (await peer.answer("t2"))["result"] == "released"
            assert agent.executions == 2


async def test_a_cancel_stops_a_shared_run_only_once_no_invoke_still_waits_for_it() -> None:
    """Two invokes under one key share one run (a duplicate while the first goes on). A
    cancel of one of them lets the other still get the run's answer; a cancel of the last
    one that waits stops the run."""
    async with FakeCoordinator(serves) as fake:
        agent, release, seen = blocking_agent()
        async with agent.connect(fake.url):
            peer = fake.peers[-1]
            await peer.invoke("t1", "hold", key="k")
            await wait_until(lambda: seen == ["started"])
            await peer.invoke("t2", "hold", key="k")  # joins t1's run
            await peer.send(type="cancel", task_id="t1", attempt=1)
            await peer.send(type="cancel", task_id="t-unknown", attempt=1)
            await asyncio.sleep(0.05)
            assert seen == ["started"]  # t2 still waits for the run: it goes on
            release.set()
            assert (await peer.answer("t2"))["result"] == "released"
            assert agent.executions == 1

            release.clear()
            await peer.invoke("t3", "hold", key="k2")
            await wait_until(lambda: seen == ["started", "started"])
            await peer.invoke("t4", "hold", key="k2")
            await peer.send(type="cancel", task_id="t4", attempt=1)
            await asyncio.sleep(0.05)
            assert seen == ["started", "started"]
            await peer.send(type="cancel", task_id="t3", attempt=0)  # 0: every attempt
            await wait_until(lambda: seen[-1] == "cancelled")
            assert (await peer.answer("t3"))["error"]["message"] == "cancelled"


async def test_the_key_cache_forgets_its_least_recently_used_answer() -> None:
    async with FakeCoordinator(serves) as fake:
        agent = Agent("counter", cache_size=2)
        runs: list[str] = []

        @agent.capability("count", idempotent=True, latency_ms=10)
        async def count(tag: str) -> int:
            runs.append(tag)
            return len(runs)

        async with agent.connect(fake.url):
            peer = fake.peers[-1]
            answers = []
            for n, key in enumerate(["k1", "k2", "k1", "k3", "k1", "k2"]):
                await peer.invoke(f"t{n}", "count", key=key, tag=key)
                answers.append((await peer.answer(f"t{n}"))["result"])
            # k1 hit (and so kept), k3 evicts k2, k1 hit again, k2 runs again
            assert answers == [1, 2, 1, 3, 1, 4]
            assert runs == ["k1", "k2", "k3", "k2"] and agent.executions == 4
            # (kept by caller and key: a key answers only the caller whose it is)
            assert list(agent._done) == [("planner", "k1"), ("planner", "k2")]


# ---------------------------------------------------------------- what a handler returns

class Row(BaseModel):
    region: str
    total: int


async def test_handler_outcomes_as_the_coordinator_receives_them() -> None:
    async with FakeCoordinator(serves) as fake:
        agent = Agent("outcomes")

        @agent.capability("Sales.Query", params=Row, idempotent=True, latency_ms=10)
        async def query(region: str, total: int) -> Row:
            return Row(region=region.upper(), total=total * 2)

        @agent.capability("odd.result", idempotent=True, latency_ms=10)
        async def odd() -> dict[str, Any]:
            return {"when": object()}

        async with agent.connect(fake.url):
            peer = fake.peers[-1]
            # the coordinator sends normalized names; a model result goes as its JSON form
            await peer.invoke("t1", "sales.query", region="east", total=2)
            assert (await peer.answer("t1"))["result"] == {"region": "EAST", "total": 4}

            await peer.invoke("t2", "sales.query", region="east", total="lots")
            bad = (await peer.answer("t2"))["error"]
            assert bad["code"] == "invalid_params" and "total" in bad["message"]
            assert bad["details"] == {"answer": True, "agent": "outcomes"}

            await peer.invoke("t3", "odd.result", key="odd")
            odd_error = (await peer.answer("t3"))["error"]
            assert odd_error["code"] == "task_failed"
            assert odd_error["message"].startswith("result is not JSON-serializable")
            assert odd_error["details"] == {"answer": False, "agent": "outcomes"}
            await peer.invoke("t4", "odd.result", key="odd")  # a fault: not cached, runs again
            assert (await peer.answer("t4"))["error"]["code"] == "task_failed"

            await peer.invoke("t5", "not.served")
            missing = (await peer.answer("t5"))["error"]
            assert missing["message"] == "agent 'outcomes' does not serve 'not.served'"
            assert missing["details"] == {"answer": False, "agent": "outcomes"}
            assert agent.executions == 4  # t1, t2, t3, t4: the unknown one never started


async def test_frames_the_agent_has_no_use_for_are_ignored(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="reach.agent")
    async with FakeCoordinator(serves) as fake:
        agent = echo_agent()
        async with agent.connect(fake.url):
            peer = fake.peers[-1]
            await peer.ws.send("{broken")
            await peer.send(type="cancel", task_id="never-sent")
            await peer.send(type="ack", task_id="never-sent")
            await peer.send(type="error", task_id="t0", error={
                "code": "task_failed", "message": "attempt t0 was given up"})
            await peer.send(type="error", error={"code": "protocol_error",
                                                 "message": "heartbeat too late"})
            await peer.invoke("t1", x=1)
            assert (await peer.answer("t1"))["result"] == {"x": 1}  # still serving
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "reach.agent"]
    assert ("DEBUG", "agent echoer: attempt t0 was given up") in records
    assert ("WARNING", "agent echoer: coordinator says heartbeat too late") in records
    assert any(level == "WARNING" and "bad frame from coordinator" in message
               for level, message in records)


async def test_a_context_without_a_connection_cannot_call_on() -> None:
    ctx = Context(task_id="t1", trace_id="t1", idempotency_key="k", capability="echo")
    with pytest.raises(RuntimeError, match="no connection to call through"):
        await ctx.submit("other.cap")
    assert ctx.time_left() is None


async def test_close_past_its_drain_cancels_the_work_in_hand() -> None:
    async with FakeCoordinator(serves) as fake:
        agent, release, seen = blocking_agent()
        peer = await connected(fake, agent)
        await peer.invoke("t1", "hold")
        await wait_until(lambda: seen == ["started"])
        await agent.close(drain=0.01)                  # never released: cut off
        assert seen == ["started", "cancelled"]
        await asyncio.wait_for(peer.done.wait(), 2)
        # what the coordinator heard, in order: the ack, leaving, the attempt given up
        assert [f["type"] for f in peer.got[1:]] == ["ack", "deregister", "error"]
        assert peer.got[-1]["error"]["message"] == "cancelled"


async def test_an_agent_closing_while_it_waits_to_reconnect_does_not_reconnect() -> None:
    async def invokes_then_drops(peer: Peer) -> None:
        await peer.welcome()
        await peer.invoke("t1", "hold")
        peer.got.append(json.loads(await peer.ws.recv()))  # the ack: the handler has started
        await peer.ws.close()

    async with FakeCoordinator(invokes_then_drops) as fake:
        # the wait before reconnecting is 0.2-0.4 s: close() starts well within it
        agent, release, seen = blocking_agent(reconnect_base=0.4, reconnect_cap=0.4)
        await agent.connect(fake.url)
        await wait_until(lambda: seen == ["started"] and not agent.online.is_set())
        closing = asyncio.ensure_future(agent.close(drain=2))  # waits for the handler
        assert agent._serve_task is not None
        await wait_until(agent._serve_task.done, timeout=1)     # the wait ended: no retry
        release.set()
        await closing
        assert len(fake.peers) == 1 and fake.peers[0].got[-1]["type"] == "ack"
