"""Issue 10, items 4, 5 and the open-mode rules: who may serve, who may read, who may take a name.

Each attack runs against a real coordinator on loopback with a legitimate agent and caller beside
it (the ``probe``): the attack gets its typed error, and the legitimate call still answers fast.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import websockets
from security.conftest import StallProbe, start_probe

from reach import Agent, Client, InvalidParams, Reach, Unauthorized, Unavailable
from reach.testing import Cluster

TOKENS = {"t-alice": "alice", "t-mallory": "mallory", "t-probe-agent": "probe-agent",
          "t-probe-caller": "probe-caller", "t-sales": "sales", "t-evil": "evil",
          "t-planner": "planner"}
CALLS = {"*": ["*"]}
SERVES = {"probe-agent": ["probe.*"], "sales": ["sales.*"], "evil": ["evil.*"]}


@pytest_asyncio.fixture
async def secured() -> AsyncIterator[tuple[Cluster, StallProbe]]:
    """A cluster with tokens, call rules and serve rules, and the legitimate pair on it."""
    cluster = await Cluster.start(tokens=TOKENS, permissions=CALLS, serves=SERVES)
    try:
        probe = await start_probe(cluster, agent_token="t-probe-agent",
                                  caller_token="t-probe-caller")
        probe.start()
        yield cluster, probe
        await probe.stop()
    finally:
        await cluster.close()


async def register_raw(url: str, name: str, caps: list[dict[str, Any]], **extra: Any
                       ) -> tuple[dict[str, Any], websockets.ClientConnection]:
    ws = await websockets.connect(url)
    await ws.send(json.dumps({"v": 1, "type": "register", "name": name,
                              "capabilities": caps, **extra}))
    return json.loads(await ws.recv()), ws


# ---------------------------------------------------------------- item 4: capability capture


async def test_an_agent_cannot_serve_a_capability_its_serve_rules_do_not_grant(
        secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    frame, ws = await register_raw(cluster.url, "evil", [{"name": "probe.echo", "weight": 1000}],
                                   token="t-evil")
    assert frame["type"] == "error" and frame["error"]["code"] == "unauthorized"
    assert "'evil' may not serve 'probe.echo'" in frame["error"]["message"]
    assert frame["error"]["details"]["rule"] == ["evil.*"]
    await ws.wait_closed()
    assert ws.close_code == 1008
    # Every call still goes to the legitimate agent, none to the would-be captor.
    for _ in range(20):
        await probe.once()
    assert [a["name"] for a in cluster.reach.agents()] == ["probe-agent"]
    await probe.check()


async def test_a_caller_token_cannot_register_an_agent(
        secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    frame, ws = await register_raw(cluster.url, "alice", [{"name": "probe.echo"}],
                                   token="t-alice")
    assert frame["error"]["code"] == "unauthorized"
    assert "no serve rule names it" in frame["error"]["message"]
    await ws.close()
    with pytest.raises(Unauthorized):  # the SDK says the same, as a typed error
        agent = Agent("alice", token="t-alice")
        agent.capability("alice.run")(lambda: 1)
        await agent.connect(cluster.url)
    await probe.check()


async def test_a_token_is_bound_to_its_principal(secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    frame, ws = await register_raw(cluster.url, "probe-agent", [{"name": "probe.echo"}],
                                   token="t-evil")  # evil's token, the probe agent's name
    assert frame["error"]["code"] == "unauthorized"
    assert "belongs to 'evil'" in frame["error"]["message"]
    await ws.close()
    with pytest.raises(Unauthorized):
        await Client.connect(cluster.url, caller="alice", token="t-mallory")
    await probe.check()


async def test_an_agent_serves_what_its_rules_grant(secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured

    async def query() -> str:
        return "sold"

    await cluster.add_agent("sales", {"sales.query": query}, token="t-sales")
    planner = await cluster.client("planner", token="t-planner")
    assert await planner.call("sales.query") == "sold"
    await probe.check()


async def test_tokens_without_serve_rules_are_said_at_start(
        caplog: pytest.LogCaptureFixture) -> None:
    async with Reach.start(tokens={"t": "a"}):
        pass
    assert any("tokens without serve rules" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- open mode


def test_a_non_loopback_bind_without_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="without tokens"):
        Reach.start(host="0.0.0.0")
    with pytest.raises(ValueError, match="without tokens"):
        Reach.start(host="")
    Reach.start(host="0.0.0.0", insecure=True)  # said explicitly: allowed (not started)
    Reach.start(host="0.0.0.0", tokens={"t": "a"})


async def test_open_mode_is_said_loudly_at_start(caplog: pytest.LogCaptureFixture) -> None:
    async with Reach.start() as reach:
        assert any("open mode" in w for w in reach.trust_warnings())
    assert any("open mode: no tokens" in r.getMessage() for r in caplog.records)


async def test_in_open_mode_another_process_cannot_take_over_a_connected_name(
        cluster: Cluster, probe: StallProbe) -> None:
    """Registering under a running agent's name used to kick it off and take its traffic."""
    frame, ws = await register_raw(cluster.url, "probe-agent", [{"name": "probe.echo"}],
                                   instance="someone-else")
    assert frame["error"]["code"] == "unavailable"
    assert "connected from another process" in frame["error"]["message"]
    await ws.wait_closed()
    assert cluster.reach.registry.by_name["probe-agent"].connected
    await probe.check()


async def test_in_open_mode_the_same_process_takes_its_name_back(cluster: Cluster) -> None:
    first, old = await register_raw(cluster.url, "twin", [{"name": "twin.run"}], instance="p1")
    second, new = await register_raw(cluster.url, "twin", [{"name": "twin.run"}], instance="p1")
    assert first["type"] == second["type"] == "welcome"
    await old.wait_closed()
    assert old.close_code == 4000
    await new.close()


# ---------------------------------------------------------------- item 5: others' work


async def test_a_reused_idempotency_key_does_not_reveal_another_callers_result(
        secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    alice = await cluster.client("alice", token="t-alice")
    mallory = await cluster.client("mallory", token="t-mallory")
    mine = await alice.submit("probe.echo", {"n": 41}, idempotency_key="secret-key")
    assert await mine.result(5) == 41
    theirs = await mallory.submit("probe.echo", {"n": 7}, idempotency_key="secret-key")
    assert not theirs.duplicate and theirs.task_id != mine.task_id
    assert await theirs.result(5) == 7  # its own work, under its own scope of the same key
    again = await alice.submit("probe.echo", {"n": 41}, idempotency_key="secret-key")
    assert again.duplicate and again.task_id == mine.task_id  # still one task for alice
    await probe.check()


async def test_status_and_result_answer_only_the_tasks_caller(
        secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    alice = await cluster.client("alice", token="t-alice")
    mallory = await cluster.client("mallory", token="t-mallory")
    mine = await alice.submit("probe.echo", {"n": 5})
    assert await mine.result(5) == 5
    assert (await alice.status(mine.task_id))["result"] == 5
    with pytest.raises(InvalidParams, match="no task with id"):
        await mallory.status(mine.task_id)
    with pytest.raises(InvalidParams, match="no task with id"):
        await mallory.result(mine.task_id, timeout=2)
    # The agent that ran it may ask about it (a caller connection under the agent's name).
    agent_side = await cluster.client("probe-agent", token="t-probe-agent")
    assert (await agent_side.status(mine.task_id))["result"] == 5
    await probe.check()


async def test_a_stranger_cannot_join_another_callers_trace(
        secured: tuple[Cluster, StallProbe]) -> None:
    cluster, probe = secured
    alice = await cluster.client("alice", token="t-alice")
    mallory = await cluster.client("mallory", token="t-mallory")
    mine = await alice.submit("probe.echo", {"n": 1})
    await mine.result(5)
    with pytest.raises(Unauthorized, match="belongs to another caller"):
        await mallory.submit("probe.echo", {"n": 2}, trace_id=mine.trace_id)
    assert [t.envelope.caller for tid in cluster.reach.gateway.traces[mine.trace_id]
            if (t := cluster.reach.gateway.find(tid))] == ["alice"]
    # The owner adds to its own trace as before.
    more = await alice.submit("probe.echo", {"n": 3}, trace_id=mine.trace_id)
    assert await more.result(5) == 3
    await probe.check()


async def test_nested_calls_join_the_trace_of_the_task_they_serve(cluster: Cluster) -> None:
    from reach import Context

    async def inner(n: int) -> int:
        return n + 1

    async def outer(n: int, ctx: Context) -> int:
        return int(await ctx.call("chain.inner", {"n": n}))

    await cluster.add_agent("inner", {"chain.inner": inner})
    await cluster.add_agent("outer", {"chain.outer": outer})
    client = await cluster.client("root")
    handle = await client.submit("chain.outer", {"n": 1})
    assert await handle.result(5) == 2
    callers = sorted(t.envelope.caller for tid in cluster.reach.gateway.traces[handle.trace_id]
                     if (t := cluster.reach.gateway.find(tid)))
    assert callers == ["outer", "root"]


# ---------------------------------------------------------------- keys stay as given


async def test_handlers_and_views_see_the_key_as_the_caller_gave_it(cluster: Cluster) -> None:
    from reach import Context

    seen: list[str] = []

    async def run(ctx: Context) -> str:
        seen.append(ctx.idempotency_key)
        return "ok"

    await cluster.add_agent("keys", {"keys.run": run})
    client = await cluster.client("a/b")  # a caller name with the separator in it
    handle = await client.submit("keys.run", idempotency_key="k/1")
    await handle.result(5)
    assert seen == ["k/1"]
    assert (await client.status(handle.task_id))["idempotency_key"] == "k/1"
    # Stored and sent scoped, without ambiguity between caller "a/b" + "k/1" and "a" + "b/k/1".
    assert cluster.reach.gateway.find(handle.task_id).envelope.idempotency_key == "a%2Fb/k/1"
    other = await cluster.client("a")
    twin = await other.submit("keys.run", idempotency_key="b/k/1")
    assert not twin.duplicate
    await twin.result(5)


async def test_a_refused_takeover_retries_by_itself_once_the_old_connection_is_gone(
        cluster: Cluster) -> None:
    """The refusal is ``unavailable``, not final: the SDK of a restarted agent keeps trying and
    gets in as soon as its old, half-open connection is dropped."""
    first, old = await register_raw(cluster.url, "phoenix", [{"name": "phoenix.run"}],
                                    instance="old-process")
    assert first["type"] == "welcome"
    agent = Agent("phoenix", reconnect_base=0.01)
    agent.capability("phoenix.run")(lambda: "reborn")
    with pytest.raises(Unavailable):  # while the old process still holds the name
        await agent.connect(cluster.url)
    await old.close()
    await asyncio.sleep(0.05)
    await agent.connect(cluster.url)
    try:
        client = await cluster.client()
        assert await client.call("phoenix.run") == "reborn"
    finally:
        await agent.close(drain=0.5)


async def test_a_refusal_with_a_long_non_ascii_reason_still_closes_with_1008() -> None:
    """The close reason was cut at 120 characters, not bytes: 100 Chinese characters made the
    close frame too long and the connection ended 1011 (found by the frame fuzzer)."""
    cluster = await Cluster.start(tokens={"t": "*"})
    try:
        async with websockets.connect(cluster.url) as ws:
            await ws.send(json.dumps({"v": 1, "type": "hello", "caller": "销" * 100,
                                      "token": "wrong"}))
            frame = json.loads(await ws.recv())
            assert frame["error"]["code"] == "unauthorized"
            await ws.wait_closed()
            assert ws.close_code == 1008
    finally:
        await cluster.close()
