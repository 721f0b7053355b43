"""Edge cases a review found, each once a bug: hangs, lost outcomes, oversize frames, drains,
streams across reconnects and retries, starvation. Real loopback components throughout."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest

from reach import Agent, Client, Context, Reach, ReachError, Unavailable
from reach.core.backoff import Backoff
from reach.server.channel import CallerSession
from reach.testing import Cluster
from reach.testing import wait_until as wait_for


async def ping() -> str:
    return "pong"


# ---------------------------------------------------------------- client hangs


async def test_submit_with_out_of_range_priority_raises_instead_of_hanging(
        reach_cluster: Cluster) -> None:
    await reach_cluster.add_agent("p", {"net.ping": ping})
    client = await reach_cluster.client()
    try:
        async with asyncio.timeout(1.0):
            await client.call("net.ping", {}, priority=10)
    except ReachError as exc:
        assert exc.code in ("invalid_params", "protocol_error")
    else:
        raise AssertionError("accepted priority 10")


async def test_ctx_call_after_the_deadline_does_not_hang(reach_cluster: Cluster) -> None:
    outcome: list[str] = []

    async def inner() -> str:
        return "inner"

    async def outer(ctx: Context) -> str:
        await asyncio.sleep(0.15)  # past the caller's deadline
        try:
            async with asyncio.timeout(1.0):
                await ctx.call("inner.run")
            outcome.append("ok")
        except ReachError as exc:
            outcome.append(exc.code)
        except TimeoutError:
            outcome.append("hung")
        return "outer"

    await reach_cluster.add_agent("in", {"inner.run": inner})
    await reach_cluster.add_agent("out", {"outer.run": outer}, latency_ms=5000)
    client = await reach_cluster.client()
    handle = await client.submit("outer.run", {}, timeout=0.1)
    with pytest.raises(ReachError):
        await handle.result(timeout=3)
    await wait_for(lambda: outcome, timeout=3)
    assert outcome != ["hung"], outcome


async def test_oversize_submit_raises_instead_of_reconnect_loop(reach_cluster: Cluster) -> None:
    async def echo(blob: str) -> int:
        return len(blob)

    await reach_cluster.add_agent("e", {"blob.echo": echo})
    client = await reach_cluster.client()
    try:
        async with asyncio.timeout(1.5):
            await client.call("blob.echo", {"blob": "x" * (1 << 20)})
    except ReachError as exc:
        assert exc.code == "protocol_error"
    else:
        raise AssertionError("a frame over max_frame_bytes was accepted")


# ---------------------------------------------------------------- streaming


async def test_stream_is_not_silently_truncated_by_a_caller_reconnect(
        reach_cluster: Cluster) -> None:
    async def count(n: int) -> Any:
        for i in range(n):
            await asyncio.sleep(0.02)
            yield i

    await reach_cluster.add_agent("gen", {"num.count": count}, latency_ms=5000)
    client = await reach_cluster.client()
    got: list[int] = []
    error: list[BaseException] = []

    async def consume() -> None:
        try:
            async for item in client.stream("num.count", {"n": 10}):
                got.append(item)
        except ReachError as exc:
            error.append(exc)

    consumer = asyncio.create_task(consume())
    await wait_for(lambda: len(got) >= 3)
    for session in list(reach_cluster.reach.channel.sessions):
        if isinstance(session, CallerSession):
            await session.ws.close()  # a network blip on the caller's connection
    async with asyncio.timeout(3):
        await consumer
    # Either every chunk, or an error: never a "complete" stream with a hole in it.
    assert got == list(range(10)) or error, got


async def test_stream_retried_after_a_fault_does_not_repeat_chunks() -> None:
    cluster = await Cluster.start(backoff=Backoff(base=0.01, jitter=0.0))
    try:
        runs = 0

        async def words() -> Any:
            nonlocal runs
            runs += 1
            for word in ("a", "b", "c"):
                if word == "c" and runs == 1:
                    raise RuntimeError("flaky")
                yield word

        await cluster.add_agent("gen", {"text.words": words}, idempotent=True)
        client = await cluster.client()
        async with asyncio.timeout(3):
            chunks = [c async for c in client.stream("text.words", {})]
        assert runs == 2
        assert chunks == ["a", "b", "c"], chunks
    finally:
        await cluster.close()


async def test_stream_with_a_repeated_idempotency_key_is_not_empty(
        reach_cluster: Cluster) -> None:
    async def words() -> Any:
        for word in ("a", "b"):
            yield word

    await reach_cluster.add_agent("gen", {"text.words": words})
    client = await reach_cluster.client()
    async with asyncio.timeout(3):
        first = [c async for c in client.stream("text.words", {}, idempotency_key="s1")]
        again = [c async for c in client.stream("text.words", {}, idempotency_key="s1")]
    assert first == ["a", "b"]
    assert again == ["a", "b"], again


# ---------------------------------------------------------------- delivery


async def test_undelivered_task_is_not_resent_to_the_same_agent_beyond_its_budget() -> None:
    import json

    import websockets

    cluster = await Cluster.start(heartbeat_interval=10.0, ack_timeout=0.05,
                                  backoff=Backoff(base=0.01, jitter=0.0))
    try:
        # 'other' declares the capability, then its socket drops: known, not healthy.
        other = await cluster.add_agent("other", {"job.run": ping})
        await other._stop_serving()
        cluster.agents.remove(other)
        invokes = 0
        async with websockets.connect(cluster.url) as mute:  # takes invokes, never answers
            await mute.send(json.dumps({"v": 1, "type": "register", "name": "mute",
                                        "capabilities": [{"name": "job.run"}]}))
            await mute.recv()

            async def drain() -> None:
                nonlocal invokes
                async for raw in mute:
                    if json.loads(raw)["type"] == "invoke":
                        invokes += 1

            reader = asyncio.create_task(drain())
            client = await cluster.client()
            handle = await client.submit("job.run", {}, max_retries=0)
            with pytest.raises(ReachError):
                await handle.result(timeout=3)
            reader.cancel()
            view = await client.status(handle.task_id)
        # max_retries=0 and one healthy candidate: one delivery, then dead.
        assert invokes == 1, (invokes, [a["outcome"] for a in view["attempts"]],
                              view["error"]["code"])
    finally:
        await cluster.close()


async def test_completion_timeout_runs_from_the_ack() -> None:
    import json

    import websockets

    cluster = await Cluster.start(heartbeat_interval=10.0, ack_timeout=1.0)
    try:
        async with websockets.connect(cluster.url) as agent:
            await agent.send(json.dumps({"v": 1, "type": "register", "name": "late-acker",
                                         "capabilities": [{"name": "job.run",
                                                           "latency_ms": 400}]}))
            await agent.recv()

            async def serve() -> None:
                async for raw in agent:
                    frame = json.loads(raw)
                    if frame["type"] != "invoke":
                        continue
                    ids = {"task_id": frame["task_id"], "attempt": frame["attempt"]}
                    await asyncio.sleep(0.3)  # within the 1 s ack timeout
                    await agent.send(json.dumps({"v": 1, "type": "ack", **ids}))
                    await asyncio.sleep(0.25)  # within 400 ms x 1.2 of the ack
                    await agent.send(json.dumps({"v": 1, "type": "result", **ids,
                                                 "result": "done"}))

            server = asyncio.create_task(serve())
            client = await cluster.client()
            try:
                assert await client.call("job.run", {}) == "done"
            finally:
                server.cancel()
    finally:
        await cluster.close()


async def test_remote_timeout_keeps_its_message_and_details(reach_cluster: Cluster) -> None:
    async def slow() -> str:
        await asyncio.sleep(0.3)
        return "late"

    await reach_cluster.add_agent("slow", {"job.slow": slow}, latency_ms=50)
    client = await reach_cluster.client()
    with pytest.raises(ReachError) as err:
        await client.call("job.slow", {})
    assert err.value.code == "timeout"
    assert err.value.details.get("agent") == "slow", (err.value.message, err.value.details)


# ---------------------------------------------------------------- restart


async def test_outcome_asked_while_the_coordinator_resumes_is_answered(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.store.store import Store

    url = f"sqlite:///{tmp_path / 'r.db'}"
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        await asyncio.sleep(0.2)
        return "done"

    agent = Agent("worker", reconnect_base=0.02)
    agent.capability("job.run")(work)
    first = await Reach.start(store=url, sqlite_synchronous="full", heartbeat_interval=0.05,
                              drain_timeout=0.01)
    port = first.port
    await agent.connect(first.url)
    async with Client.connect(first.url) as client:
        handle = await client.submit("job.run", {})
    await started.wait()
    await first.stop()  # the task is unfinished in the store

    original = Store.unfinished

    async def slow_unfinished(self: Store) -> Any:  # a slow database (PostgreSQL, full sync)
        await asyncio.sleep(0.3)
        return await original(self)

    monkeypatch.setattr(Store, "unfinished", slow_unfinished)
    starting = asyncio.ensure_future(Reach.start(store=url, sqlite_synchronous="full",
                                                 port=port, heartbeat_interval=0.05))
    second = None
    try:
        await asyncio.sleep(0.1)  # still reading unfinished tasks: not serving yet
        with pytest.raises(Unavailable):
            await Client.connect(f"ws://127.0.0.1:{port}")
        second = await starting  # serving only once every unfinished task is live again
        async with Client.connect(f"ws://127.0.0.1:{port}") as client:
            outcome = asyncio.create_task(client.result(handle.task_id, timeout=2))
            try:
                assert await outcome == "done"
            except ReachError as exc:
                view = await client.status(handle.task_id)
                raise AssertionError(f"never answered ({exc.code}); the task is "
                                     f"{view['state']} with {view['result']!r}") from None
    finally:
        second = second or await starting
        await agent.close(drain=0.5)
        await second.stop()


# ---------------------------------------------------------------- agent SDK


async def test_agent_close_leaves_no_handler_running(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    cluster = await Cluster.start(store=url, sqlite_synchronous="full")  # threaded store
    try:
        running = 0

        async def work(t: float) -> str:
            nonlocal running
            running += 1
            try:
                await asyncio.sleep(t)
            finally:
                running -= 1
            return "done"

        agent = await cluster.add_agent("w", {"job.run": work}, latency_ms=5000)
        client = await cluster.client()
        first = await client.submit("job.run", {"t": 0.4})
        await wait_for(lambda: running == 1)
        store = cluster.reach.store
        commit = store._commit

        def slow_commit(*args: Any) -> None:  # a slow disk, on the store's worker thread
            time.sleep(0.1)
            commit(*args)

        store._commit = slow_commit  # type: ignore[method-assign]
        second = asyncio.create_task(client.submit("job.run", {"t": 0.6}))
        gateway = cluster.reach.gateway
        await wait_for(lambda: any(t.attempts for t in gateway.live.values()
                                   if t.task_id != first.task_id))
        await agent.close(drain=2.0)  # graceful: deregister, drain in-flight work
        cluster.agents.remove(agent)
        still = running
        await second
        assert still == 0, f"{still} handler(s) still running after close() returned"
    finally:
        await cluster.close()


async def test_concurrent_first_ctx_calls_share_one_client(reach_cluster: Cluster) -> None:
    async def inner() -> str:
        return "x"

    arrived = 0
    together = asyncio.Event()

    async def outer(ctx: Context) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 4:
            together.set()
        await together.wait()  # four handlers reach their first ctx.call at the same time
        return str(await ctx.call("inner.run"))

    await reach_cluster.add_agent("in", {"inner.run": inner})
    agent = await reach_cluster.add_agent("out", {"outer.run": outer})
    client = await reach_cluster.client()
    await asyncio.gather(*(client.call("outer.run", {}) for _ in range(4)))
    await agent.close()
    reach_cluster.agents.remove(agent)
    await asyncio.sleep(0.05)
    left = [s for s in reach_cluster.reach.channel.sessions
            if isinstance(s, CallerSession) and s.caller == "out"]
    for leaked in [o for o in gc.get_objects()
                   if type(o) is Client and o.caller == "out"]:
        await leaked.close()  # clean up what the agent lost track of
    assert left == [], f"{len(left)} caller connection(s) of a closed agent still open"


async def test_an_oversize_result_does_not_take_other_tasks_down(reach_cluster: Cluster) -> None:
    async def big() -> str:
        await asyncio.sleep(0.05)
        return "x" * (1 << 20)

    async def write(order: str) -> str:
        await asyncio.sleep(0.3)
        return f"wrote {order}"

    await reach_cluster.add_agent("w", {"blob.make": big, "order.write": write},
                                  latency_ms=5000)
    client = await reach_cluster.client()
    other = await client.submit("order.write", {"order": "o-1"})  # not idempotent
    with pytest.raises(ReachError):
        await client.call("blob.make", {}, timeout=3)
    assert await other.result(timeout=3) == "wrote o-1"


async def test_trace_of_a_replayed_task_has_no_duplicate_events() -> None:
    cluster = await Cluster.start()
    try:
        fail = True

        async def write() -> str:
            if fail:
                raise RuntimeError("disk full")
            return "ok"

        await cluster.add_agent("w", {"order.write": write})
        client = await cluster.client()
        handle = await client.submit("order.write", {})
        with pytest.raises(ReachError):
            await handle.result(timeout=3)
        fail = False
        await cluster.reach.replay(handle.task_id)
        events = cluster.reach.trace(handle.trace_id)
        keys = [(e["state"], e["at"], e["note"]) for e in events]
        assert len(keys) == len(set(keys)), keys
    finally:
        await cluster.close()


async def test_same_key_for_another_capability_is_not_answered_with_the_first_result(
        reach_cluster: Cluster) -> None:
    async def charge() -> str:
        return "charged"

    async def refund() -> str:
        return "refunded"

    await reach_cluster.add_agent("pay", {"card.charge": charge, "card.refund": refund})
    client = await reach_cluster.client()
    assert await client.call("card.charge", {}, idempotency_key="order-7") == "charged"
    try:
        result = await client.call("card.refund", {}, idempotency_key="order-7")
    except ReachError:
        return  # refusing the reuse would be fine too
    assert result == "refunded"


async def test_retry_uses_the_first_agent_when_the_other_is_saturated() -> None:
    cluster = await Cluster.start(backoff=Backoff(base=0.01, jitter=0.0))
    try:
        faults = 0

        async def flaky(n: int) -> int:
            nonlocal faults
            if faults == 0:
                faults += 1
                raise RuntimeError("transient")
            return n

        async def steady(n: int) -> int:
            return n

        async def busy() -> str:
            await asyncio.sleep(0.6)
            return "busy"

        await cluster.add_agent("a", {"calc.run": flaky}, idempotent=True)
        await cluster.add_agent("b", {"calc.run": steady, "busy.run": busy},
                                idempotent=True, max_concurrency=1)
        client = await cluster.client()
        hog = await client.submit("busy.run", {})  # b is now at its max_concurrency
        await wait_for(lambda: any(r.inflight for r in cluster.reach.registry.by_id.values()))
        assert await client.call("calc.run", {"n": 7}, timeout=2) == 7
        await hog.result(timeout=3)
    finally:
        await cluster.close()


async def test_cancel_right_after_invoke_does_not_poison_the_key(reach_cluster: Cluster) -> None:
    from reach.wire import protocol as p
    async def work(x: int) -> int:
        return x

    agent = await reach_cluster.add_agent("c", {"calc.run": work})
    sent: list[str] = []
    agent._post_text = sent.append  # type: ignore[method-assign]
    invoke = p.Invoke(task_id="t1", attempt=1, capability="calc.run", params={"x": 3},
                      idempotency_key="k", trace_id="tr")
    agent._on_frame(p.dump(invoke))
    agent._on_frame(p.dump(p.Cancel(task_id="t1", attempt=1)))  # same batch of frames
    await asyncio.sleep(0.05)
    agent._on_frame(p.dump(invoke.model_copy(update={"task_id": "t2"})))  # a retry, same key
    await asyncio.sleep(0.05)
    outcomes = [s for s in sent if '"result"' in s or '"error"' in s]
    assert len(outcomes) == 2, sent


# ---------------------------------------------------------------- coordinator lifecycle


async def test_failed_start_releases_the_store(tmp_path: Any) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        before = set(asyncio.all_tasks())
        with pytest.raises(OSError):
            await Reach.start(port=busy.getsockname()[1], store=f"sqlite:///{tmp_path / 'x.db'}")
        await asyncio.sleep(0.01)
        leaked = [t for t in asyncio.all_tasks() - before if not t.done()]
        for task in leaked:
            task.cancel()
        assert leaked == [], [t.get_name() for t in leaked]


async def test_replay_interrupted_by_stop_does_not_raise_cancelled_error() -> None:
    cluster = await Cluster.start(drain_timeout=0.05)
    try:
        async def write() -> str:
            raise RuntimeError("disk full")

        agent = await cluster.add_agent("w", {"order.write": write})
        client = await cluster.client()
        handle = await client.submit("order.write", {})
        with pytest.raises(ReachError):
            await handle.result(timeout=3)
        await agent.close()  # nobody serves it now: the replay backs off, waiting for an agent
        replay = asyncio.create_task(cluster.reach.replay(handle.task_id))
        await asyncio.sleep(0.05)
        await cluster.reach.stop()
        try:
            await replay
        except asyncio.CancelledError:
            raise AssertionError("replay() raised CancelledError though nobody cancelled it")
        except ReachError:
            pass
    finally:
        await cluster.close()


async def test_low_priority_is_not_starved_under_contention() -> None:
    cluster = await Cluster.start(queue_wait=0.5)
    try:
        async def work(p: int) -> int:
            await asyncio.sleep(0.01)
            return p

        await cluster.add_agent("one", {"job.run": work}, max_concurrency=1, latency_ms=5000)
        client = await cluster.client()
        stop = time.monotonic() + 0.8
        low: list[asyncio.Task[Any]] = []
        calls: set[asyncio.Task[Any]] = set()
        while time.monotonic() < stop:
            while len(calls) < 4:  # always a few high-priority tasks waiting
                call = asyncio.create_task(client.call("job.run", {"p": 9}, priority=9))
                calls.add(call)
                call.add_done_callback(calls.discard)
            if not low:
                await asyncio.sleep(0.02)
                low.append(asyncio.create_task(client.call("job.run", {"p": 0}, priority=0)))
            await asyncio.sleep(0.005)
        await asyncio.gather(*calls, return_exceptions=True)
        assert await low[0] == 0
    finally:
        await cluster.close()


async def test_result_just_under_the_frame_limit_reaches_the_caller(
        reach_cluster: Cluster) -> None:
    size = (1 << 20) - 93  # the agent's result frame (91 bytes around it) still fits

    async def big() -> str:
        return "x" * size

    await reach_cluster.add_agent("b", {"blob.make": big})
    client = await reach_cluster.client()
    try:
        async with asyncio.timeout(1.5):
            result = await client.call("blob.make", {})
    except ReachError as exc:
        assert exc.code == "protocol_error"  # a clear refusal would do
    except TimeoutError:
        done = [t.state.value for t in reach_cluster.reach.gateway.recent.values()]
        raise AssertionError(f"no outcome; the coordinator has the task {done}") from None
    else:
        assert len(result) == size


async def test_agent_is_not_online_after_close(reach_cluster: Cluster) -> None:
    agent = await reach_cluster.add_agent("p", {"net.ping": ping})
    assert agent.online.is_set()
    await agent.close()
    reach_cluster.agents.remove(agent)
    assert not agent.online.is_set()


async def test_a_callers_short_deadline_does_not_open_the_agents_breaker(
        reach_cluster: Cluster) -> None:
    from reach import ReachTimeout

    async def slowish() -> str:
        await asyncio.sleep(0.1)
        return "done"

    await reach_cluster.add_agent("steady", {"report.make": slowish}, latency_ms=1000)
    client = await reach_cluster.client()
    for _ in range(6):
        with pytest.raises(ReachTimeout):
            await client.call("report.make", timeout=0.02)
    agent = next(a for a in reach_cluster.reach.agents() if a["name"] == "steady")
    assert agent["breaker"] == "closed" and agent["faults"] == 0
    assert await client.call("report.make", timeout=2) == "done"


async def test_a_task_error_may_carry_any_detail_name(reach_cluster) -> None:
    """Found by the trace tests: ``TaskError("...", code="missing")`` crashed the agent's
    reply (a keyword clash), so the caller waited for a completion timeout instead."""
    from reach import TaskError

    async def query() -> None:
        raise TaskError("table missing", code="missing", message="shadow", agent="me")

    await reach_cluster.add_agent("C", {"c.query": query})
    client = await reach_cluster.client()
    with pytest.raises(TaskError) as info:
        await client.call("c.query", {}, timeout=5)
    assert info.value.message == "table missing"
    assert info.value.details["code"] == "missing"
