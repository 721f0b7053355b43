"""What the adapter base does on its edges: declarations in every accepted shape and the
mistakes it names, a call's life when the link closes under it, the health watch when a check
is cancelled, and the registry record it gives back only when it is still its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reach import Agent, Client, Reach
from reach.adapters import Adapter
from reach.adapters.base import declare
from reach.ports import Work
from reach.wire.protocol import CapabilitySpec

from .test_attach import FAST, Scripted


class Recorded:
    """A ``ports.Reply`` that keeps what the link told it."""

    def __init__(self) -> None:
        self.acks = 0
        self.outcome: tuple[str, Any] | None = None
        self.resolved = asyncio.Event()

    def ack(self) -> None:
        self.acks += 1

    def chunk(self, seq: int, data: Any) -> None:
        raise AssertionError("no chunks expected")

    def resolve(self, kind: str, payload: Any = None) -> None:
        assert self.outcome is None, f"resolved twice: {self.outcome} then {kind}"
        self.outcome = (kind, payload)
        self.resolved.set()


def work(capability: str = "echo.run", task_id: str = "t" * 32, attempt: int = 1) -> Work:
    return Work(task_id, attempt, capability, {"a": 1}, "c/k", "b" * 32, "c")


class Plain(Adapter):
    """An adapter with no keys of its own, a check that can hang, and shut counted."""

    kind = "plain"

    def __init__(self, name: str, capabilities: Any, **kw: Any) -> None:
        super().__init__(name, capabilities, **kw)
        self.check_gate: asyncio.Event | None = None
        self.shuts = 0
        self.cancelled_invokes = 0
        self.release = asyncio.Event()

    async def invoke(self, work: Work, how: dict[str, Any], reply: Any) -> Any:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled_invokes += 1
            raise
        return "done"

    async def check(self) -> bool:
        if self.check_gate is not None:
            await self.check_gate.wait()
        return True

    async def shut(self) -> None:
        self.shuts += 1


# ---------------------------------------------------------------- declarations


def test_capability_specs_may_stand_in_for_entries_in_a_list_or_a_table() -> None:
    listed = declare("x", [CapabilitySpec(name="echo.run", latency_ms=300)], frozenset())
    assert list(listed) == ["echo.run"] and listed["echo.run"].how == {}
    assert listed["echo.run"].spec.latency_ms == 300
    # In a table the key names it, whatever name the spec carried.
    table = declare("x", {"geo.lookup": CapabilitySpec(name="other.name", idempotent=True)},
                    frozenset({"path"}))
    assert table["geo.lookup"].spec.name == "geo.lookup" and table["geo.lookup"].spec.idempotent
    assert Plain("x", [CapabilitySpec(name="echo.run")]).specs[0].name == "echo.run"


def test_declaration_mistakes_are_named() -> None:
    with pytest.raises(ValueError, match="capability 'echo.run': expected a table of "
                                         "settings, got int"):
        declare("x", {"echo.run": 5}, frozenset())
    # A name the wire accepts but that has no words cannot be routed.
    with pytest.raises(ValueError, match=r"^agent 'x': capability name '\.\.\.' has no words"):
        declare("x", {"...": {}}, frozenset())
    with pytest.raises(ValueError, match="needs a name"):
        Plain("", {"echo.run": {}})
    with pytest.raises(ValueError, match="agent 'x': max_concurrency must be at least 1"):
        Plain("x", {"echo.run": {}}, max_concurrency=0)


def test_an_adapter_says_nothing_of_where_it_is_unless_it_overrides_describe() -> None:
    assert Plain("x", {"echo.run": {}}).describe() == {}


# ---------------------------------------------------------------- a call's life


async def test_delivery_is_refused_for_an_undeclared_capability_and_once_closed() -> None:
    adapter = Plain("x", {"echo.run": {}})
    assert not adapter.deliver(work("other.run"), Recorded())
    await adapter.close()
    reply = Recorded()
    assert not adapter.deliver(work(), reply)
    assert reply.outcome is None and reply.acks == 0  # nothing was started


async def test_close_cancels_the_calls_in_flight_which_are_lost_and_closing_twice_is_once(
        ) -> None:
    adapter = Plain("x", {"echo.run": {}})
    replies = [Recorded(), Recorded()]
    for i, reply in enumerate(replies):
        assert adapter.deliver(work(attempt=i + 1), reply)
    await asyncio.sleep(0)  # the calls start
    await adapter.close("detached")
    assert [r.outcome for r in replies] == [("lost", None), ("lost", None)]
    assert adapter.cancelled_invokes == 2 and adapter._calls == {}
    await adapter.close("again")
    assert adapter.shuts == 1


async def test_drained_waits_for_the_calls_in_flight_at_most_the_grace() -> None:
    adapter = Plain("x", {"echo.run": {}})
    await adapter.drained(10.0)  # nothing in flight: at once
    reply = Recorded()
    adapter.deliver(work(), reply)
    await adapter.drained(0.05)
    assert reply.outcome is None and len(adapter._calls) == 1  # the grace ran out first
    asyncio.get_running_loop().call_later(0.01, adapter.release.set)
    await adapter.drained(10.0)  # ends as soon as the call does
    assert reply.outcome == ("ok", "done") and adapter._calls == {}
    await adapter.close()


# ---------------------------------------------------------------- health


async def test_a_cancelled_health_check_is_cancellation_not_a_missed_beat() -> None:
    adapter = Plain("x", {"echo.run": {}})
    adapter.check_gate = asyncio.Event()
    check = asyncio.ensure_future(adapter.first_check(10.0))
    await asyncio.sleep(0.01)
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check
    adapter.check_gate.set()
    assert await adapter.first_check(1.0) is True


async def test_a_websocket_agent_cannot_take_an_attached_agents_name_until_it_is_detached(
        ) -> None:
    """The operator attached 'legacy': a websocket agent registering under that name is
    refused (unavailable, naming the way out) and the adapter keeps serving; once detached,
    the name is free."""
    from reach.errors import Unavailable

    async with Reach.start(**FAST) as reach:
        adapter = Scripted("legacy")
        await reach.attach(adapter)
        ws = Agent("legacy", reconnect_base=0.02)

        @ws.capability("echo.run", latency_ms=500)
        async def echo() -> str:
            return "websocket"

        with pytest.raises(Unavailable, match=r"detach that one first"):
            await asyncio.wait_for(ws.connect(reach.url), 5)
        assert reach.registry.by_name["legacy"].link is adapter
        async with Client.connect(reach.url) as client:
            assert (await client.call("echo.run", {}, timeout=2))["how"] == "x"
            await reach.detach("legacy")
            async with ws.connect(reach.url):
                assert await client.call("echo.run", {}, timeout=2) == "websocket"
        assert adapter._closed


def test_membership_beats_and_gives_back_the_record_only_for_the_link_holding_it() -> None:
    from types import SimpleNamespace

    from reach.adapters.base import Membership
    from reach.testing import ManualClock

    calls: list[tuple[str, Any]] = []
    registry = SimpleNamespace(
        heartbeat=lambda record, now, **kw: calls.append(("beat", kw["inflight"])),
        disconnected=lambda record, now: calls.append(("gone", now)))
    ours, theirs = object(), object()
    record: Any = SimpleNamespace(link=ours)
    membership = Membership(registry, record, ManualClock(wall=100.0), 1.0)
    membership.alive(ours, inflight=3)
    membership.gone(ours)
    record.link = theirs  # another connection registered under the name
    membership.alive(ours, inflight=4)
    membership.gone(ours)
    assert calls == [("beat", 3), ("gone", 100.0)]


def test_the_package_exports_resolve_including_the_lazily_imported_ones() -> None:
    import reach.adapters as package
    from reach.adapters.http import HttpAgent
    from reach.adapters.nats import NatsAgent

    package.__dict__.pop("HttpAgent", None)  # as in a fresh interpreter: not imported yet
    assert package.HttpAgent is HttpAgent and package.NatsAgent is NatsAgent
    assert all(getattr(package, name) is not None for name in package.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'HtpAgent'"):
        package.HtpAgent  # noqa: B018
