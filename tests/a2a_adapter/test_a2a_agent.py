"""A2A agents as Reach capabilities: an agent written with the official a2a-sdk (its
``DefaultRequestHandler`` and Starlette routes under uvicorn), attached with ``A2AAgent``,
called through ``Client``; and, as a process of its own, killed mid-task."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from a2a_adapter.conftest import FAST, Supervised, served
from a2a_adapter.remote_agent import ECHO_PARAMS, Remote

from reach import Client, Reach, TaskError
from reach.adapters import A2AAgent
from reach.errors import InvalidParams, ReachError, ReachTimeout, TaskFailed


@pytest.fixture(params=[False, True], ids=["polled", "streamed"])
def streaming(request: pytest.FixtureRequest) -> bool:
    """Whether the agent's card says it streams (then calls are SendStreamingMessage)."""
    return bool(request.param)


async def test_skills_become_capabilities_called_through_reach(streaming: bool) -> None:
    async with served(Remote(streaming=streaming)) as url, Reach.start(**FAST) as reach:
        view = await reach.attach(A2AAgent("remote", url))
        assert view["kind"] == "a2a"
        specs = {s.name: s for s in reach.adapters["remote"].specs}
        assert set(specs) == {f"remote.{s}" for s in (
            "echo", "greet", "refuse", "reject", "slow", "hang", "flaky", "book", "count", "say", "picky")}
        echo, greet = specs["remote.echo"], specs["remote.greet"]
        # the card's skill extension declares echo's params and idempotency
        assert echo.params == ECHO_PARAMS and echo.idempotent
        assert echo.description == "say it back" and echo.tags == ["test"]
        assert echo.intents == ["echo this back"]
        # a skill the extension does not name: any object, not idempotent, a write
        assert greet.params == {"type": "object"} and not greet.idempotent
        assert greet.scope == "write"
        async with Client.connect(reach.url, "tester") as client:
            # integers come back as integers (a data part's numbers are doubles)
            assert await client.call("remote.echo", {"x": 3}) == {"echo": {"x": 3}}
            with pytest.raises(InvalidParams):  # Reach checks the declared schema
                await client.call("remote.echo", {"y": 3})
            assert await client.call("remote.greet", {"text": "Ada"}) == "hello Ada"
            with pytest.raises(TaskError, match="no such order 'o-1'") as failed:
                await client.call("remote.refuse", {"order": "o-1"})
            assert failed.value.details["a2a_state"] == "failed"
            with pytest.raises(TaskError, match="not for me") as rejected:
                await client.call("remote.reject", {})
            assert rejected.value.details["a2a_state"] == "rejected"
            # a reply without a task is a result too; an A2A error refusing the request an answer
            assert await client.call("remote.say", {"text": "hi"}) == "you said hi"
            with pytest.raises(TaskError, match="x must be positive") as picky:
                await client.call("remote.picky", {})
            assert picky.value.details["a2a_error"] == "InvalidParamsError"


async def test_a_slow_task_is_followed_to_its_end(streaming: bool) -> None:
    async with served(Remote(streaming=streaming)) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, poll_max=0.05))
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("remote.slow", {"ms": 300}, timeout=5) == {
                "waited_ms": 300}


async def test_a_streaming_skill_s_artifacts_are_chunks(streaming: bool) -> None:
    """A skill declared ``streaming`` (the card's extension): each artifact is a chunk for
    ``Client.stream`` as it comes (when the agent streams; at the end when polled), and
    ``call`` gets their list."""
    async with served(Remote(streaming=streaming)) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, poll_max=0.05))
        assert {s.name: s for s in reach.adapters["remote"].specs}["remote.count"].streaming
        async with Client.connect(reach.url, "tester") as client:
            got = [chunk async for chunk in client.stream("remote.count", {"n": 3}, timeout=5)]
            assert got == [{"i": 0}, {"i": 1}, {"i": 2}]
            assert await client.call("remote.count", {"n": 2}, timeout=5) == [{"i": 0},
                                                                              {"i": 1}]


async def test_a_task_longer_than_one_request_may_take_is_followed(streaming: bool) -> None:
    """``request_timeout`` bounds each request, not the task: a stream may stay quiet longer."""
    async with served(Remote(streaming=streaming)) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, request_timeout=0.1, poll_max=0.05))
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("remote.slow", {"ms": 300}, timeout=5) == {
                "waited_ms": 300}


async def test_a_call_reach_gives_up_on_is_cancelled_at_the_agent(streaming: bool) -> None:
    remote = Remote(streaming=streaming)
    async with served(remote) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, poll_max=0.05))
        async with Client.connect(reach.url, "tester") as client:
            with pytest.raises(ReachTimeout):
                await client.call("remote.hang", {}, timeout=0.3)
        async with asyncio.timeout(5):  # the forwarded CancelTask reaches the executor
            while not remote.cancelled:
                await asyncio.sleep(0.01)
        assert remote.started.is_set() and len(remote.cancelled) == 1


async def test_an_agent_killed_mid_task_is_retried_if_idempotent_else_dead_lettered(
        tmp_path: Path, streaming: bool) -> None:
    async with Supervised(tmp_path, streaming) as agent, \
            Reach.start(**{**FAST, "max_retries": 3}) as reach:
        await reach.attach(A2AAgent("remote", agent.url, poll_max=0.05))
        async with Client.connect(reach.url, "tester") as client:
            # the first try kills the agent; the retry reaches the restarted one
            assert await client.call("remote.flaky", {}, timeout=30) == {
                "skill": "flaky", "survived": True}
            assert agent.starts == 2
            with pytest.raises(TaskFailed) as lost:
                await client.call("remote.book", {"room": "r1"}, timeout=30)
            assert not isinstance(lost.value, TaskError)
        assert any(t["capability"] == "remote.book" for t in reach.dead_letters())


async def test_a_card_that_sends_calls_elsewhere_needs_rpc_url() -> None:
    async with served(Remote(), card_url="http://10.1.2.3:9/") as url, \
            Reach.start(**FAST) as reach:
        with pytest.raises(ValueError, match="rpc_url"):
            await reach.attach(A2AAgent("remote", url))
        await reach.attach(A2AAgent("remote", url, rpc_url=url))
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("remote.echo", {"x": 1}) == {"echo": {"x": 1}}


async def test_skills_overrides_the_card_and_must_name_its_skills() -> None:
    async with served(Remote()) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, skills={"greet": {"idempotent": True,
                                                                     "scope": "read"}}))
        greet = {s.name: s for s in reach.adapters["remote"].specs}["remote.greet"]
        assert greet.idempotent and greet.scope == "read"
        with pytest.raises(ValueError, match="nope"):
            await reach.attach(A2AAgent("other", url, skills={"nope": {}}))


async def test_an_unreachable_agent_is_not_attached() -> None:
    async with Reach.start(**FAST) as reach:
        with pytest.raises(ValueError, match="could not read the A2A agent's card"):
            await reach.attach(A2AAgent("gone", "http://127.0.0.1:9", connect_timeout=0.5))
        assert "gone" not in reach.adapters


def test_a2a_agent_needs_an_http_url() -> None:
    with pytest.raises(ValueError, match="agent 'r'"):
        A2AAgent("r", "ftp://x")


def test_importing_reach_adapters_does_not_import_a2a() -> None:
    probe = ("import json, sys, reach, reach.adapters; from reach.adapters import McpServer; "
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'a2a')))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(run.stdout) == []


@pytest.mark.parametrize(("status", "answer"), [(503, False), (500, False), (404, True)])
async def test_an_http_error_is_a_fault_and_a_4xx_an_answer(status: int, answer: bool) -> None:
    remote = Remote()
    async with served(remote) as url, Reach.start(**{**FAST, "max_retries": 1}) as reach:
        await reach.attach(A2AAgent("remote", url))
        remote.rpc_status = status
        async with Client.connect(reach.url, "tester") as client:
            with pytest.raises(TaskFailed, match=f"HTTP {status}") as failed:
                await client.call("remote.echo", {"x": 1}, timeout=5)
        assert isinstance(failed.value, TaskError) is answer
        assert failed.value.details["status"] == status


async def test_a_skill_added_to_the_card_becomes_a_capability() -> None:
    from a2a.types.a2a_pb2 import AgentSkill

    remote = Remote()
    async with served(remote) as url, Reach.start(**FAST) as reach:
        await reach.attach(A2AAgent("remote", url, health_interval=0.05))
        remote.more_skills.append(AgentSkill(id="greet2", name="Greet again",
                                             description="greets", tags=["text"]))
        async with asyncio.timeout(5):  # the next health check reads the new card
            while "remote.greet2" not in reach.registry.index:
                await asyncio.sleep(0.01)
        assert "remote.echo" in reach.registry.index


async def test_an_agent_gone_before_the_message_is_sent_is_undelivered() -> None:
    async with Reach.start(**FAST) as reach:
        async with served(Remote()) as url:
            await reach.attach(A2AAgent("remote", url))
        async with Client.connect(reach.url, "tester") as client:
            with pytest.raises(ReachError):
                await client.call("remote.greet", {"text": "a"}, timeout=1)
        [letter] = reach.dead_letters()
        first = letter["attempts"][0]
        assert first["outcome"] == "undelivered" and "refused" in first["error"]


async def test_an_agents_file_declares_an_a2a_agent() -> None:
    from reach.adapters import parse_agents

    async with served(Remote()) as url, Reach.start(**FAST) as reach:
        [agent] = parse_agents(f"""
[[agent]]
kind = "a2a"
name = "remote"
url = "{url}"
headers = {{ Authorization = "Bearer ${{A2A_TOKEN}}" }}
skills = {{ greet = {{ idempotent = true }} }}
""", env={"A2A_TOKEN": "t0k"})
        assert isinstance(agent, A2AAgent) and agent.headers == {"Authorization": "Bearer t0k"}
        await reach.attach(agent)
        greet = {s.name: s for s in reach.adapters["remote"].specs}["remote.greet"]
        assert greet.idempotent
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("remote.greet", {"text": "Bo"}) == "hello Bo"


async def test_a_skill_dropped_from_the_card_goes_and_the_agent_stays() -> None:
    remote = Remote()
    async with served(remote) as url, Reach.start(**FAST) as reach:
        # an override of the dropped skill is no mistake once attached
        await reach.attach(A2AAgent("remote", url, health_interval=0.05,
                                    skills={"greet": {"idempotent": True}}))
        remote.dropped_skills.add("greet")
        async with asyncio.timeout(5):
            while "remote.greet" in reach.registry.index:
                await asyncio.sleep(0.01)
        async with Client.connect(reach.url, "tester") as client:
            assert await client.call("remote.echo", {"x": 2}) == {"echo": {"x": 2}}
