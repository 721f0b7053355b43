"""A 2025 MCP session belongs to the caller that opened it: another caller (another token)
presenting its ``Mcp-Session-Id`` is answered as if the session did not exist (404), can
neither use it nor end it, and the opener carries on; and ``tools/list_changed`` reaches only
the sessions whose caller may call what changed. The opener speaks through raw HTTP here
because the other caller is an attacker replaying a leaked id, which no official client does."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from mcp_door.conftest import FAST, mcp_client, serve

from reach import Agent, Reach

VERSION = "2025-11-25"


def headers(token: str, session: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
           "Content-Type": "application/json"}
    if session is not None:
        out |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": VERSION}
    return out


def rpc(method: str, id: int | None = None, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    return message if id is None else message | {"id": id}


async def test_a_session_id_is_no_use_to_another_caller() -> None:
    async with Reach.start(**FAST, mcp=True,
                           tokens={"tok-a": "alice", "tok-b": "bob", "tok-w": "worker"},
                           permissions={"alice": ("echo.*",), "bob": ("echo.*",)}) as reach:
        assert reach.mcp_url is not None
        url = reach.mcp_url
        agent = serve(Agent("worker", token="tok-w", reconnect_base=0.02))
        await agent.connect(reach.url)
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                opened = await http.post(url, headers=headers("tok-a"), json=rpc(
                    "initialize", 1, protocolVersion=VERSION, capabilities={},
                    clientInfo={"name": "alice", "version": "1"}))
                assert opened.status_code == 200, opened.text
                session = opened.headers["mcp-session-id"]
                done = await http.post(url, headers=headers("tok-a", session),
                                       json=rpc("notifications/initialized"))
                assert done.status_code == 202

                stolen = await http.post(url, headers=headers("tok-b", session),
                                         json=rpc("tools/list", 2))
                assert stolen.status_code == 404
                assert stolen.json()["error"]["message"] == "Session not found"
                ended = await http.delete(url, headers=headers("tok-b", session))
                assert ended.status_code == 404

                mine = await http.post(url, headers=headers("tok-a", session),
                                       json=rpc("tools/call", 3, name="echo.run",
                                                arguments={"x": 1}))
                assert mine.status_code == 200, mine.text
                assert '"echo":{"x":1}' in mine.text.replace(" ", "")
        finally:
            await agent.close(drain=0.2)


async def test_list_changed_goes_only_to_callers_whose_tools_changed() -> None:
    async with Reach.start(**FAST, mcp=True,
                           tokens={"tok-a": "alice", "tok-b": "bob", "tok-1": "billing",
                                   "tok-2": "echo"},
                           permissions={"alice": ("echo.*",), "bob": ("billing.*",)}) as reach:
        assert reach.mcp_url is not None
        told: dict[str, asyncio.Event] = {"alice": asyncio.Event(), "bob": asyncio.Event()}

        def on_message(who: str) -> Any:
            async def handle(message: Any) -> None:
                if getattr(getattr(message, "root", message), "method", "") == \
                        "notifications/tools/list_changed":
                    told[who].set()
            return handle

        agents: list[Agent] = []

        async def join(name: str, capability: str) -> None:
            token = {"billing": "tok-1", "echo": "tok-2"}[name]
            agent = Agent(name, token=token, reconnect_base=0.02)
            agent.capability(capability)(lambda: "ok")
            await agent.connect(reach.url)
            agents.append(agent)
        try:
            async with mcp_client(reach.mcp_url, "tok-a", mode="legacy",
                                  message_handler=on_message("alice")) as alice, \
                    mcp_client(reach.mcp_url, "tok-b", mode="legacy",
                               message_handler=on_message("bob")) as bob:
                assert [t.name for t in (await alice.list_tools()).tools] == ["reach_intent"]
                assert [t.name for t in (await bob.list_tools()).tools] == ["reach_intent"]
                await join("billing", "billing.charge")
                await asyncio.wait_for(told["bob"].wait(), 5)
                await asyncio.sleep(0.2)  # well past the 50 ms debounce
                assert not told["alice"].is_set()
                told["bob"].clear()
                await join("echo", "echo.run")
                await asyncio.wait_for(told["alice"].wait(), 5)
                await asyncio.sleep(0.2)
                assert not told["bob"].is_set()
                assert "echo.run" in [t.name for t in (await alice.list_tools()).tools]
        finally:
            for agent in agents:
                await agent.close(drain=0.2)


async def test_a_2026_listener_hears_only_of_its_own_callers_tools() -> None:
    """The same on the stateless revision: each ``subscriptions/listen`` stream is its
    caller's, and a change is published only to the callers it concerns (one bus for the
    door told every listener of every caller's change)."""
    async with Reach.start(**FAST, mcp=True,
                           tokens={"tok-a": "alice", "tok-b": "bob", "tok-1": "billing"},
                           permissions={"alice": ("echo.*",), "bob": ("billing.*",)}) as reach:
        assert reach.mcp_url is not None and reach.mcp is not None
        agent = Agent("billing", token="tok-1", reconnect_base=0.02)
        agent.capability("billing.charge")(lambda: "ok")
        heard: dict[str, int] = {"alice": 0, "bob": 0}

        async def listen(sub: Any, who: str) -> None:
            async for _event in sub:
                heard[who] += 1
        try:
            async with mcp_client(reach.mcp_url, "tok-a", mode="2026-07-28") as alice, \
                    mcp_client(reach.mcp_url, "tok-b", mode="2026-07-28") as bob, \
                    alice.listen(tools_list_changed=True) as a_sub, \
                    bob.listen(tools_list_changed=True) as b_sub:
                assert sorted(reach.mcp.listens.callers()) == ["alice", "bob"]
                tasks = [asyncio.create_task(listen(a_sub, "alice")),
                         asyncio.create_task(listen(b_sub, "bob"))]
                try:
                    await agent.connect(reach.url)
                    async with asyncio.timeout(5):
                        while heard["bob"] == 0:
                            await asyncio.sleep(0.01)
                    await asyncio.sleep(0.2)  # well past the 50 ms debounce
                    assert heard == {"alice": 0, "bob": 1}
                    assert [t.name for t in (await bob.list_tools()).tools] == [
                        "billing.charge", "reach_intent"]
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0.05)
            assert reach.mcp.listens.callers() == []  # dropped with their last stream
        finally:
            await agent.close(drain=0.2)
