"""SendMessage through the official A2A client: data parts call a capability through the
gateway, text parts go through intent routing; results, task errors and refusals."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from a2a_door.conftest import FAST, a2a_client, call, data, say, send, serve, worked
from counting import counting

from reach import Agent, Reach


async def test_a_data_part_calls_the_capability_and_completes_with_an_artifact() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, call("math.add", {"a": 2, "b": 3}))
            task = event.task
            assert task.status.state == pb.TASK_STATE_COMPLETED
            [artifact] = task.artifacts
            assert artifact.name == "result"
            assert data(artifact.parts[0]) == {"sum": 5.0}
            stored = await reach.gateway.task(task.id)  # the A2A id is Reach's task id
            assert stored is not None and stored.envelope.capability == "math.add"
            assert stored.envelope.params == {"a": 2, "b": 3}
            assert task.context_id == stored.envelope.trace_id


async def test_a_text_part_is_routed_by_intent() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, say("echo back what I say"))
            assert event.task.status.state == pb.TASK_STATE_COMPLETED
            assert data(event.task.artifacts[0].parts[0]) == {"echo": {}}
            stored = await reach.gateway.task(event.task.id)
            assert stored is not None and stored.envelope.capability == "echo.run"


async def test_a_task_error_fails_the_task_with_its_message() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            [event] = await send(client, call("orders.cancel", {"order": "o-9"}))
            status = event.task.status
            assert status.state == pb.TASK_STATE_FAILED
            assert status.message.parts[0].text == "no such order 'o-9'"
            assert data(status.message.parts[1])["code"] == "task_failed"
            assert not event.task.artifacts


async def test_no_route_and_bad_params_are_errors_with_reachs_code() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            with pytest.raises(UnsupportedOperationError) as unknown:
                await send(client, call("nobody.does.this", {}))
            assert unknown.value.data == {"code": "no_route"}
            with pytest.raises(InvalidParamsError) as bad:
                await send(client, call("math.add", {"a": 1.5, "b": 2}))
            assert bad.value.data == {"code": "invalid_params"}
            with pytest.raises(InvalidParamsError):
                await send(client, pb.SendMessageRequest(message=pb.Message(
                    message_id="m-empty", role=pb.ROLE_USER)))


async def test_the_message_id_is_the_idempotency_key() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with counting(reach.url) as runs:
            async with a2a_client(reach.a2a_url) as client:
                request = call("count.up", {})
                [first] = await send(client, request)
                [again] = await send(client, request)  # a client's retry: the same message
                assert again.task.id == first.task.id and runs == [1]


async def test_return_immediately_answers_the_task_as_accepted() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with worked(reach) as client:
            request = call("echo.run", {"x": "y"})
            request.configuration.return_immediately = True
            [event] = await send(client, request)
            assert event.task.status.state in (pb.TASK_STATE_SUBMITTED,
                                               pb.TASK_STATE_WORKING,
                                               pb.TASK_STATE_COMPLETED)
            outcome = reach.gateway.outcome(event.task.id)
            if outcome is not None:  # still running: wait for its end
                await asyncio.wait_for(asyncio.shield(outcome), 5)
            got = await client.get_task(pb.GetTaskRequest(id=event.task.id))
            assert got.status.state == pb.TASK_STATE_COMPLETED
            assert data(got.artifacts[0].parts[0]) == {"echo": {"x": "y"}}


async def test_the_five_lines_of_docs_a2a() -> None:
    from a2a.client import ClientConfig, create_client
    from a2a.helpers import get_data_parts, new_data_message
    from a2a.types import Role, SendMessageRequest

    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", reconnect_base=0.02))
        await agent.connect(reach.url)
        seen = []
        try:
            client = await create_client(reach.a2a_url, ClientConfig(streaming=False))
            ask = new_data_message({"capability": "echo.run", "params": {"x": 1}},
                                   role=Role.ROLE_USER)
            async for event in client.send_message(SendMessageRequest(message=ask)):
                seen.append(get_data_parts(event.task.artifacts[0].parts))
            await client.close()
        finally:
            await agent.close(drain=0.2)
    assert seen == [[{"echo": {"x": 1.0}}]]


async def test_a_call_gets_the_gateways_retries_and_timeouts() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        agent = Agent("flaky", reconnect_base=0.02)
        tries: list[int] = []
        never = asyncio.Event()

        @agent.capability("flaky.read", idempotent=True)
        async def flaky() -> dict[str, int]:
            tries.append(1)
            if len(tries) == 1:
                raise RuntimeError("a passing fault")
            return {"tries": len(tries)}

        @agent.capability("stuck.read")
        async def stuck() -> None:
            await never.wait()
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url) as client:
                [event] = await send(client, call("flaky.read", {}))
                assert event.task.status.state == pb.TASK_STATE_COMPLETED
                assert data(event.task.artifacts[0].parts[0]) == {"tries": 2.0}
            async with httpx.AsyncClient(headers={"X-Reach-Timeout": "0.3"}, timeout=10) as http:
                client = await create_client(reach.a2a_url, ClientConfig(httpx_client=http,
                                                                         streaming=False))
                async with client:
                    [late] = await send(client, call("stuck.read", {}))
            assert late.task.status.state == pb.TASK_STATE_FAILED
            assert data(late.task.status.message.parts[1])["code"] == "timeout"
        finally:
            never.set()
            await agent.close(drain=0.2)
