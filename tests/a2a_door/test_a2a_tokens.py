"""The A2A door under tokens: the front door's token check and each caller's call rules."""

from __future__ import annotations

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from a2a_door.conftest import FAST, a2a_client, call, card_of, send, serve

from reach import Agent, Reach


async def test_a_caller_without_permission_neither_sees_nor_calls_the_skill() -> None:
    async with Reach.start(**FAST, a2a=True,
                           tokens={"tok-a": "alice", "tok-b": "bob", "tok-w": "worker"},
                           permissions={"alice": ("echo.*",), "bob": ("*",)}) as reach:
        assert reach.a2a_url is not None
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with a2a_client(reach.a2a_url, "tok-a") as alice:
                card = await card_of(reach.a2a_url, "tok-a")
                assert [s.id for s in card.skills] == ["echo.run"]
                scheme = card.security_schemes["bearer"].http_auth_security_scheme
                assert scheme.scheme == "Bearer"
                assert "bearer" in card.security_requirements[0].schemes
                [event] = await send(alice, call("echo.run", {"a": "b"}))
                assert event.task.status.state == pb.TASK_STATE_COMPLETED
                mine = event.task.id
                with pytest.raises(UnsupportedOperationError) as refused:
                    await send(alice, call("math.add", {"a": 1, "b": 2}))
                assert refused.value.data == {"code": "unauthorized"}
            async with a2a_client(reach.a2a_url, "tok-b") as bob:
                assert len((await card_of(reach.a2a_url, "tok-b")).skills) == 4
                with pytest.raises(TaskNotFoundError):  # alice's task is not bob's to read
                    await bob.get_task(pb.GetTaskRequest(id=mine))
            async with httpx.AsyncClient(timeout=10) as http:  # no token: refused at the door
                answer = await http.get(reach.a2a_url + "/.well-known/agent-card.json")
                assert answer.status_code == 401
        finally:
            await agent.close(drain=0.2)
