"""End to end over real loopback websockets: coordinator, Agent SDK and Client SDK together."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import BaseModel

from reach import (
    Agent,
    Client,
    Context,
    InvalidParams,
    NoRoute,
    Reach,
    ReachTimeout,
    Rejected,
    TaskError,
    TaskFailed,
    Unauthorized,
    Unavailable,
)
from reach.testing import Cluster
from reach.testing import wait_until as wait_for


class SalesQuery(BaseModel):
    region: str
    quarter: str


def state_of(reach: Reach, name: str) -> str:
    return next(a["state"] for a in reach.agents() if a["name"] == name)


# ---------------------------------------------------------------- basics


async def test_call_with_pydantic_params_and_context(reach_cluster: Cluster) -> None:
    seen: list[Context] = []

    async def query_sales(region: str, quarter: str, ctx: Context) -> dict[str, Any]:
        seen.append(ctx)
        return {"region": region, "quarter": quarter, "total": 1200}

    await reach_cluster.add_agent("order-analysis", {"sales.query": query_sales},
                                  params=SalesQuery, idempotent=True, latency_ms=200)
    client = await reach_cluster.client("planner")
    handle = await client.submit("sales.query", {"region": "east", "quarter": "Q3"},
                                 idempotency_key="sq-1")
    assert await handle.result(timeout=5) == {"region": "east", "quarter": "Q3", "total": 1200}
    ctx = seen[0]
    assert (ctx.task_id, ctx.trace_id, ctx.idempotency_key) == (
        handle.task_id, handle.trace_id, "sq-1")
    assert ctx.caller == "planner"
    view = await client.status(handle.task_id)
    assert view["state"] == "succeeded"
    assert [h["state"] for h in view["history"]][0] == "pending"
    assert view["attempts"][0]["agent"] == "order-analysis"


async def test_start_is_awaitable_and_a_context_manager_and_instances_are_isolated() -> None:
    async with Reach.start() as one:
        two = await Reach.start()
        try:
            assert one.url != two.url and one.url.startswith("ws://127.0.0.1:")
            agent = Agent("only-on-one")

            @agent.capability("x.run")
            async def run() -> int:
                return 1

            await agent.connect(one.url)
            assert [a["name"] for a in one.agents()] == ["only-on-one"]
            assert two.agents() == []
            async with Client.connect(two.url) as client:
                with pytest.raises(NoRoute):
                    await client.call("x.run")
            await agent.close()
        finally:
            await two.stop()


async def test_nested_calls_share_the_trace(reach_cluster: Cluster) -> None:
    async def figures(region: str) -> dict[str, int]:
        return {"east": 10}

    async def report(region: str, ctx: Context) -> str:
        data = await ctx.call("sales.query", {"region": region})
        return f"report {data}"

    await reach_cluster.add_agent("sales", {"sales.query": figures})
    await reach_cluster.add_agent("writer", {"report.generate": report}, latency_ms=2000)
    client = await reach_cluster.client()
    handle = await client.submit("report.generate", {"region": "east"})
    assert await handle.result(5) == "report {'east': 10}"
    events = reach_cluster.reach.trace(handle.trace_id)
    tasks = {e["task_id"] for e in events}
    assert len(tasks) == 2
    child = next(e for e in events if e["capability"] == "sales.query")
    assert child["parent_task_id"] == handle.task_id
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)


async def test_sync_handlers_run_off_the_loop(reach_cluster: Cluster) -> None:
    def blocking(n: int) -> int:
        time.sleep(0.05)
        return n * 2

    await reach_cluster.add_agent("cpu", {"math.double": blocking}, max_concurrency=4)
    client = await reach_cluster.client()
    results = await asyncio.gather(*(client.call("math.double", {"n": i}) for i in range(4)))
    assert results == [0, 2, 4, 6]


async def test_streaming_capability(reach_cluster: Cluster) -> None:
    async def generate(prompt: str) -> Any:
        for word in prompt.split():
            yield word

    await reach_cluster.add_agent("llm", {"text.generate": generate})
    client = await reach_cluster.client()
    chunks = [c async for c in client.stream("text.generate", {"prompt": "a b c"})]
    assert chunks == ["a", "b", "c"]
    assert await client.call("text.generate", {"prompt": "x y"}) == ["x", "y"]


# ---------------------------------------------------------------- errors


async def test_typed_errors_before_delivery(reach_cluster: Cluster) -> None:
    calls = []

    async def query(region: str, quarter: str) -> int:
        calls.append(region)
        return 1

    await reach_cluster.add_agent("sales", {"sales.query": query}, params=SalesQuery)
    client = await reach_cluster.client()
    with pytest.raises(NoRoute) as no_route:
        await client.call("sales.querry", {})
    assert "sales.query" in no_route.value.suggestions
    with pytest.raises(InvalidParams) as invalid:
        await client.call("sales.query", {"region": "east"})
    assert "quarter" in invalid.value.message
    assert calls == []  # nothing was delivered
    # The name is normalized: any spelling of the capability reaches it.
    assert await client.call("QuerySales", {"region": "e", "quarter": "Q1"}) == 1


async def test_task_error_is_an_answer_never_retried(reach_cluster: Cluster) -> None:
    runs = []

    async def lookup(sku: str) -> int:
        runs.append(sku)
        raise TaskError(f"unknown sku {sku}", sku=sku)

    await reach_cluster.add_agent("inv-1", {"stock.query": lookup}, idempotent=True)
    await reach_cluster.add_agent("inv-2", {"stock.query": lookup}, idempotent=True)
    client = await reach_cluster.client()
    with pytest.raises(TaskError) as err:
        await client.call("stock.query", {"sku": "nope"})
    assert "unknown sku nope" in err.value.message
    assert runs == ["nope"]
    assert reach_cluster.reach.dead_letters() == []
    assert all(a["faults"] == 0 for a in reach_cluster.reach.agents())


async def test_idempotent_fault_fails_over_to_another_agent() -> None:
    cluster = await Cluster.start(seed=1)
    try:
        async def broken(sku: str) -> int:
            raise RuntimeError("pool exhausted")

        async def healthy(sku: str) -> int:
            return 7

        await cluster.add_agent("bad", {"stock.query": broken}, idempotent=True, weight=1000)
        await cluster.add_agent("good", {"stock.query": healthy}, idempotent=True, weight=1)
        client = await cluster.client()
        handle = await client.submit("stock.query", {"sku": "a"})
        assert await handle.result(5) == 7
        view = await client.status(handle.task_id)
        assert [a["agent"] for a in view["attempts"]] == ["bad", "good"]
        assert view["attempts"][0]["outcome"] == "fault"
        assert any(h["state"] == "retrying" for h in view["history"])
    finally:
        await cluster.close()


async def test_fault_in_non_idempotent_work_is_dead_lettered_then_replayed() -> None:
    cluster = await Cluster.start()
    try:
        fixed = False
        runs = 0

        async def write(order: str) -> str:
            nonlocal runs
            runs += 1
            if not fixed:
                raise RuntimeError("bad SQL deploy")
            return f"written {order}"

        await cluster.add_agent("orders", {"order.write": write}, scope="write")
        client = await cluster.client()
        with pytest.raises(TaskFailed) as err:
            await client.call("order.write", {"order": "o-1"})
        assert "bad SQL deploy" in err.value.message
        assert runs == 1  # not idempotent: never retried
        letters = cluster.reach.dead_letters(capability="order.write")
        assert len(letters) == 1
        letter = letters[0]
        assert letter["envelope"]["params"] == {"order": "o-1"}
        assert letter["attempts"][0]["error"] == "RuntimeError: bad SQL deploy"
        assert cluster.reach.dead_letters(error="deploy") == letters
        assert cluster.reach.dead_letters(error="unrelated") == []
        fixed = True
        view = await cluster.reach.replay(letter["task_id"])
        assert view["state"] == "succeeded" and view["result"] == "written o-1"
        assert cluster.reach.dead_letters() == []
        assert (await client.status(letter["task_id"]))["state"] == "succeeded"
    finally:
        await cluster.close()


async def test_unavailable_when_declared_but_nobody_online(reach_cluster: Cluster) -> None:
    async def ping() -> str:
        return "pong"

    agent = await reach_cluster.add_agent("pinger", {"net.ping": ping})
    client = await reach_cluster.client()
    assert await client.call("net.ping") == "pong"
    await agent.close()
    reach_cluster.agents.remove(agent)
    await wait_for(lambda: state_of(reach_cluster.reach, "pinger") == "offline")
    with pytest.raises(Unavailable):
        await client.call("net.ping")


async def test_slow_non_idempotent_call_times_out_and_runs_once(reach_cluster: Cluster) -> None:
    runs = 0

    async def slow_write(item: str) -> str:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.5)
        return "done"

    await reach_cluster.add_agent("slow", {"ticket.create": slow_write}, latency_ms=50)
    client = await reach_cluster.client()
    with pytest.raises(ReachTimeout):
        await client.call("ticket.create", {"item": "t"})
    assert runs == 1


async def test_back_pressure_rejects_after_queue_wait() -> None:
    cluster = await Cluster.start(queue_wait=0.02)
    try:
        running = 0
        peak = 0
        # The two running calls end only once the other four were answered: a slot freed
        # while they still wait (a loop running late on a loaded machine) would serve one.
        release = asyncio.Event()

        async def work() -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await release.wait()
            running -= 1
            return 1

        await cluster.add_agent("narrow", {"job.run": work}, max_concurrency=2)
        client = await cluster.client()
        calls = [asyncio.ensure_future(client.call("job.run")) for _ in range(6)]
        async with asyncio.timeout(10):
            while sum(c.done() for c in calls) < 4:
                await asyncio.sleep(0.005)
        release.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        rejected = [o for o in outcomes if isinstance(o, Rejected)]
        assert outcomes.count(1) == 2 and len(rejected) == 4
        assert rejected[0].level > 0
        assert peak == 2
    finally:
        await cluster.close()


async def test_queued_work_runs_when_a_slot_frees(reach_cluster: Cluster) -> None:
    async def quick() -> str:
        await asyncio.sleep(0.01)
        return "ok"

    await reach_cluster.add_agent("one-slot", {"job.quick": quick}, max_concurrency=1)
    client = await reach_cluster.client()
    assert await asyncio.gather(*(client.call("job.quick") for _ in range(5))) == ["ok"] * 5


# ---------------------------------------------------------------- idempotency


async def test_duplicate_submit_returns_the_first_task(reach_cluster: Cluster) -> None:
    runs = 0

    async def charge(amount: int) -> str:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.02)
        return f"charged {amount}"

    await reach_cluster.add_agent("billing", {"payment.charge": charge}, scope="write")
    client = await reach_cluster.client()
    first, second = await asyncio.gather(
        client.submit("payment.charge", {"amount": 5}, idempotency_key="order-9"),
        client.submit("payment.charge", {"amount": 5}, idempotency_key="order-9"))
    assert first.task_id == second.task_id
    assert {first.duplicate, second.duplicate} == {False, True}
    third = await client.submit("payment.charge", {"amount": 5}, idempotency_key="order-9")
    assert third.task_id == first.task_id
    assert await third.result(5) == "charged 5"
    assert runs == 1


async def test_agent_runs_a_key_once_even_when_delivered_twice(reach_cluster: Cluster) -> None:
    from reach.wire import protocol as p
    runs = 0

    async def slow(x: int) -> int:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.05)
        return x

    agent = await reach_cluster.add_agent("dup", {"calc.run": slow})
    invoke = p.Invoke(task_id="t1", capability="calc.run", params={"x": 3},
                      idempotency_key="same", trace_id="tr")
    sent: list[str] = []
    agent._post_text = sent.append  # type: ignore[method-assign]
    agent._on_invoke(invoke)
    agent._on_invoke(invoke.model_copy(update={"attempt": 1}))  # while the first runs
    await wait_for(lambda: len([s for s in sent if '"result"' in s]) == 2)
    agent._on_invoke(invoke.model_copy(update={"attempt": 2}))  # after it finished
    await wait_for(lambda: len([s for s in sent if '"result"' in s]) == 3)
    assert runs == 1


# ---------------------------------------------------------------- identity and liveness


async def test_identity_survives_reconnect_and_restart(tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    reach = await Reach.start(store=store, heartbeat_interval=0.05)
    agent = Agent("analyst", reconnect_base=0.02)

    @agent.capability("sales.query")
    async def q() -> int:
        return 1

    await agent.connect(reach.url)
    first_id = agent.agent_id
    port = reach.port
    async with Client.connect(reach.url) as client:
        handle = await client.submit("sales.query")
        await handle.result(5)
    await reach.stop()
    await wait_for(lambda: not agent.online.is_set())
    reach = await Reach.start(store=store, port=port, heartbeat_interval=0.05)
    try:
        await wait_for(lambda: agent.online.is_set(), timeout=5)
        assert agent.agent_id == first_id
        assert reach.agents()[0]["agent_id"] == first_id
        async with Client.connect(reach.url) as client:
            view = await client.status(handle.task_id)  # a task from before the restart
            assert view["state"] == "succeeded" and view["result"] == 1
            assert await client.call("sales.query") == 1
    finally:
        await agent.close()
        await reach.stop()


async def test_a_newer_connection_replaces_the_old_one(reach_cluster: Cluster) -> None:
    """The same agent process (same ``instance``) reconnecting takes its name over."""
    import json

    import websockets

    register = json.dumps({"v": 1, "type": "register", "name": "twin", "instance": "i-1",
                           "capabilities": [{"name": "twin.run"}]})
    async with websockets.connect(reach_cluster.url) as old:
        await old.send(register)
        first = json.loads(await old.recv())
        async with websockets.connect(reach_cluster.url) as new:
            await new.send(register)
            second = json.loads(await new.recv())
            assert second["agent_id"] == first["agent_id"]
            await old.wait_closed()
            assert old.close_code == 4000
            assert state_of(reach_cluster.reach, "twin") == "online"


async def test_closed_socket_is_suspected_then_offline(reach_cluster: Cluster) -> None:
    async def ping() -> str:
        return "pong"

    agent = await reach_cluster.add_agent("flaky", {"net.ping": ping})
    assert agent.heartbeat_interval == reach_cluster.reach.settings.heartbeat_interval
    assert state_of(reach_cluster.reach, "flaky") == "online"
    await agent._stop_serving()  # the socket drops without a goodbye
    reach_cluster.agents.remove(agent)
    await wait_for(lambda: state_of(reach_cluster.reach, "flaky") != "online")
    assert state_of(reach_cluster.reach, "flaky") == "suspected"
    await wait_for(lambda: state_of(reach_cluster.reach, "flaky") == "offline")


async def test_round_robin_spreads_calls() -> None:
    cluster = await Cluster.start(strategy="round_robin")
    try:
        served: list[str] = []
        for name in ("a", "b", "c"):
            async def handler(name: str = name) -> str:
                served.append(name)
                return name
            await cluster.add_agent(name, {"echo.run": handler})
        client = await cluster.client()
        for _ in range(6):
            await client.call("echo.run")
        assert sorted(served) == ["a", "a", "b", "b", "c", "c"]
    finally:
        await cluster.close()


# ---------------------------------------------------------------- security


async def test_tokens_and_permissions() -> None:
    cluster = await Cluster.start(
        tokens={"agent-secret": "sales", "planner-secret": "planner", "intern-secret": "intern"},
        permissions={"planner": ["sales.*"], "intern": ["scope:write"]})
    try:
        async def q() -> int:
            return 1

        with pytest.raises(Unauthorized):
            await cluster.add_agent("sales", {"sales.query": q}, token="wrong")
        await cluster.add_agent("sales", {"sales.query": q}, token="agent-secret")
        with pytest.raises(Unauthorized):
            await Client.connect(cluster.url, caller="planner", token="intern-secret")
        planner = await cluster.client("planner", token="planner-secret")
        assert await planner.call("sales.query") == 1
        intern = await cluster.client("intern", token="intern-secret")
        with pytest.raises(Unauthorized):
            await intern.call("sales.query")
    finally:
        await cluster.close()


async def test_idempotency_keys_expire_after_their_ttl(reach_cluster: Cluster) -> None:
    async def charge() -> str:
        return "ok"

    await reach_cluster.add_agent("billing", {"payment.charge": charge})
    client = await reach_cluster.client()
    first = await client.submit("payment.charge", idempotency_key="k-ttl")
    await first.result(5)
    gateway = reach_cluster.reach.gateway
    assert gateway.prune_keys(before=time.time() - 3600) == 0  # still within the TTL
    assert (await client.submit("payment.charge", idempotency_key="k-ttl")).duplicate
    assert gateway.prune_keys(before=time.time() + 1) == 1
    again = await client.submit("payment.charge", idempotency_key="k-ttl")
    assert not again.duplicate and again.task_id != first.task_id


async def test_a_capability_known_from_before_a_restart_is_unavailable_not_unknown(
        tmp_path: Any) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    async with Reach.start(store=store) as reach:
        agent = Agent("inventory")

        @agent.capability("stock.query")
        async def q() -> int:
            return 1

        await agent.connect(reach.url)
        await agent.close()
    async with Reach.start(store=store) as reach:
        async with Client.connect(reach.url) as client:
            with pytest.raises(Unavailable) as err:
                await client.call("stock.query")
            assert "inventory" in err.value.message
            with pytest.raises(NoRoute):
                await client.call("stock.querry")


async def test_a_submit_the_store_could_not_commit_is_refused_and_frees_its_key(
        reach_cluster: Cluster) -> None:
    from reach import ReachError

    runs = 0

    async def work() -> str:
        nonlocal runs
        runs += 1
        return "ran"

    await reach_cluster.add_agent("w", {"job.run": work})
    client = await reach_cluster.client()
    store = reach_cluster.reach.store
    real = store._commit

    def broken(*_: Any) -> None:
        raise OSError("disk full")

    store._commit = broken  # type: ignore[method-assign]
    try:
        with pytest.raises(ReachError) as err:
            await client.submit("job.run", idempotency_key="k-disk")
        assert "not accepted" in err.value.message and "disk full" in err.value.message
    finally:
        store._commit = real  # type: ignore[method-assign]
    # The key was not taken by the refused task: a retry runs normally.
    handle = await client.submit("job.run", idempotency_key="k-disk")
    assert not handle.duplicate and await handle.result(5) == "ran"
    # The refused task may already have been delivered when its commit failed (delivery
    # overlaps the commit); the agent's key cache then answers the retry without a second run.
    assert runs == 1


async def _crashed_store(path: Any, *, idempotent: bool) -> tuple[str, str]:
    """A store as a coordinator leaves it when killed mid-task: one task dispatched to agent
    'writer', never finished. Returns (store url, task id)."""
    from reach.core.tasks import Attempt, Envelope, TaskState, new_task
    from reach.store.store import Store
    from reach.wire.protocol import CapabilitySpec

    url = f"sqlite:///{path / 'crashed.db'}"
    store = Store(url)
    await store.open()
    await store.save_agent("ag-writer", "writer", "1", [CapabilitySpec(
        name="order.write", idempotent=idempotent).model_dump()], 4, time.time())
    task = new_task(Envelope(task_id="t-crash", trace_id="tr", capability="order.write",
                             params={}, caller="anonymous", idempotency_key="k-crash"),
                    time.time())
    task.attempts.append(Attempt(number=1, agent_id="ag-writer", agent="writer",
                                 started_at=time.time()))
    task.move(TaskState.DISPATCHED, time.time(), "attempt 1 to writer")
    await store.insert(task)
    await store.close()
    return url, "t-crash"


async def test_resumed_non_idempotent_task_waits_for_its_agent_then_dead_letters(
        tmp_path: Any) -> None:
    url, task_id = await _crashed_store(tmp_path, idempotent=False)
    other = Agent("other-writer")

    @other.capability("order.write")
    async def write() -> str:
        return "written twice!"

    async with Reach.start(store=url, recovery_grace=0.3) as reach:
        await other.connect(reach.url)  # a different agent must not get it
        async with Client.connect(reach.url) as client:
            with pytest.raises(Unavailable) as err:
                await client.result(task_id, timeout=5)
            assert "did not come back" in err.value.message
            assert "not idempotent" in err.value.message
            view = await client.status(task_id)
            assert view["state"] == "dead"
            assert [a["outcome"] for a in view["attempts"]] == ["lost"]
        assert [d["task_id"] for d in reach.dead_letters()] == [task_id]
        await other.close()


async def test_resumed_task_goes_back_to_the_agent_that_held_its_key(tmp_path: Any) -> None:
    url, task_id = await _crashed_store(tmp_path, idempotent=False)
    served: list[str] = []
    agents = []
    for name in ("other-writer", "writer"):
        agent = Agent(name)

        async def write(name: str = name) -> str:
            served.append(name)
            return f"by {name}"

        agent.capability("order.write")(write)
        agents.append(agent)
    async with Reach.start(store=url, recovery_grace=5) as reach:
        await agents[0].connect(reach.url)
        await asyncio.sleep(0.05)  # the task waits: only 'writer' may run it
        assert served == []
        await agents[1].connect(reach.url)
        async with Client.connect(reach.url) as client:
            assert await client.result(task_id, timeout=5) == "by writer"
        assert served == ["writer"]
        for agent in agents:
            await agent.close()
