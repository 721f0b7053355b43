"""reach.attach with an in-process adapter: what every adapter gets from the base, shown on
the smallest real one (no I/O of its own), through a real coordinator and a real client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach import Agent, Client, Reach, TaskError
from reach.adapters import Adapter, AdapterAnswer, Undelivered
from reach.core.backoff import Backoff
from reach.errors import ReachError
from reach.ports import Reply, Work
from reach.testing import wait_until

FAST = dict(heartbeat_interval=0.05, suspect_after=2, offline_after=40)


class Scripted(Adapter):
    """Answers from a script: each call pops the next behaviour."""

    kind = "scripted"
    OWN_KEYS = frozenset({"note"})

    def __init__(self, name: str, script: list[Any] | None = None,
                 capabilities: dict[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(name, capabilities or {
            "echo.run": {"idempotent": True, "latency_ms": 500, "note": "x"}}, **kw)
        self.script = list(script or [])
        self.healthy = True
        self.seen: list[Work] = []

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        self.seen.append(work)
        step = self.script.pop(0) if self.script else "ok"
        if step == "fault":
            raise RuntimeError("boom")
        if step == "answer":
            raise AdapterAnswer("no such order", status=404)
        if step == "undelivered":
            raise Undelivered("connection refused")
        if step == "hang":
            await asyncio.sleep(3600)
        return {"echo": work.params, "how": how["note"]}

    async def check(self) -> bool:
        return self.healthy


async def test_attached_agent_is_called_and_shown_with_its_kind() -> None:
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(Scripted("legacy"))
        assert view["kind"] == "scripted" and view["state"] == "online"
        async with Client.connect(reach.url) as client:
            assert await client.call("echo.run", {"a": 1}) == {"echo": {"a": 1}, "how": "x"}
        assert reach.agents()[0]["calls"] == 1


async def test_faults_retry_answers_do_not_and_undelivered_fails_over() -> None:
    async with Reach.start(**FAST) as reach:
        adapter = Scripted("legacy", ["fault", "ok", "answer"])
        await reach.attach(adapter)
        async with Client.connect(reach.url) as client:
            assert (await client.call("echo.run", {}))["how"] == "x"  # fault, then retried
            with pytest.raises(TaskError) as answered:
                await client.call("echo.run", {})
            assert answered.value.details["status"] == 404
            assert answered.value.details["agent"] == "legacy"
        assert len(adapter.seen) == 3
        assert reach.agents()[0]["faults"] == 1


async def test_undelivered_work_goes_to_another_agent_even_when_not_idempotent() -> None:
    async with Reach.start(**FAST) as reach:
        adapter = Scripted("legacy", ["undelivered"] * 50)
        await reach.attach(adapter)
        agent = Agent("ws-agent")

        @agent.capability("echo.run", latency_ms=500)
        async def echo() -> str:
            return "from websocket"

        async with agent.connect(reach.url), Client.connect(reach.url) as client:
            await wait_until(lambda: len(reach.agents()) == 2)
            results = {await client.call("echo.run", {}) for _ in range(6)}
        assert "from websocket" in results


async def test_failed_health_check_suspects_and_a_pass_brings_it_back() -> None:
    async with Reach.start(**FAST) as reach:
        adapter = Scripted("legacy")
        adapter.healthy = False
        view = await reach.attach(adapter)
        assert view["state"] == "suspected"
        adapter.healthy = True
        await wait_until(lambda: reach.agents()[0]["state"] == "online")
        adapter.healthy = False
        await wait_until(lambda: reach.agents()[0]["state"] == "suspected")


async def test_detach_and_stop_release_the_adapter() -> None:
    async with Reach.start(**FAST) as reach:
        adapter = Scripted("legacy")
        await reach.attach(adapter)
        with pytest.raises(ValueError, match="already attached"):
            await reach.attach(Scripted("legacy"))
        await reach.detach("legacy")
        assert adapter._closed and reach.agents()[0]["state"] != "online"
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError) as err:
                await client.call("echo.run", {}, timeout=0.3)
            assert err.value.code in ("unavailable", "timeout")
        again = Scripted("legacy")
        await reach.attach(again)
    assert again._closed


def test_declarations_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"capability 'echo.run': unknown key\(s\) \['pth'\]"):
        Scripted("x", capabilities={"echo.run": {"pth": "/"}})
    with pytest.raises(ValueError, match="latency_ms"):
        Scripted("x", capabilities={"echo.run": {"latency_ms": -1}})
    with pytest.raises(ValueError, match="declares no capabilities"):
        Adapter.__init__(Scripted.__new__(Scripted), "x", {})


async def test_adapter_agents_show_in_metrics_dead_letters_and_traces() -> None:
    import httpx
    async with Reach.start(**FAST, max_retries=1, backoff=Backoff(base=0.001)) as reach:
        await reach.attach(Scripted("legacy", ["fault"] * 10))
        async with Client.connect(reach.url) as client:
            handle = await client.submit("echo.run", {"n": 1})
            with pytest.raises(ReachError):
                await handle.result(timeout=5)
        letter = reach.dead_letters()[0]
        assert [a["agent"] for a in letter["attempts"]] == ["legacy", "legacy"]
        assert "RuntimeError: boom" in letter["error"]["message"]
        assert {e["capability"] for e in reach.trace(handle.trace_id)} == {"echo.run"}
        url = reach.url.replace("ws://", "http://") + "/metrics"
        async with httpx.AsyncClient() as http:
            text = (await http.get(url)).text
        assert 'reach_agent_info{agent="legacy",kind="scripted",version="0"} 1.0' in text
        assert 'reach_agent_breaker_state{agent="legacy"}' in text


async def test_a_failed_attach_releases_the_adapter_and_registers_nothing() -> None:
    async with Reach.start(**FAST, max_schema_bytes=256) as reach:
        big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}}
        adapter = Scripted("legacy", capabilities={"echo.run": {"params": big, "note": "x"}})
        with pytest.raises(ValueError, match="bytes"):
            await reach.attach(adapter)
        assert adapter._closed and reach.agents() == [] and reach.adapters == {}
