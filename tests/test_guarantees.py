"""Delivery guarantees added on top of the core: retry budget, hedged reads, filtered and
automatic replay, back-pressure levels, and breaker resets on a new deploy."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach import Agent, Rejected, TaskFailed, Unavailable
from reach.core.backoff import Backoff
from reach.core.resilience import Pacer, RetryBudget
from reach.testing import Cluster, wait_until

FAST = Backoff(base=0.005, cap=0.02)


# ---------------------------------------------------------------- retry budget (pure)


def test_budget_allows_a_minimum_then_a_share_of_first_attempts() -> None:
    budget = RetryBudget(ratio=0.2, minimum=2, window=10.0)
    assert budget.spend(0.0) and budget.spend(0.1)
    assert not budget.spend(0.2)  # the minimum is spent and nothing was sent yet
    for _ in range(10):
        budget.first(0.3)
    assert budget.spend(0.4) and budget.spend(0.5)  # 20 % of 10 first attempts
    assert not budget.spend(0.6)
    assert budget.spend(10.4)  # the window moved on: the old retries no longer count


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 100)), max_size=300))
def test_budget_never_exceeds_its_share(ops: list[tuple[bool, float]]) -> None:
    budget = RetryBudget(ratio=0.2, minimum=3, window=5.0)
    granted: list[float] = []
    firsts: list[float] = []
    for is_retry, now in sorted(ops, key=lambda o: o[1]):
        if is_retry:
            if budget.spend(now):
                granted.append(now)
        else:
            budget.first(now)
            firsts.append(now)
        # the window is bucketed by whole seconds: count what the budget itself still holds
        start = int(now) - 5 + 1
        in_window = [t for t in granted if int(t) >= start]
        seen = [t for t in firsts if int(t) >= start]
        assert len(in_window) <= 3 + 0.2 * len(seen) + 1e-9


def test_pacer_slows_down_under_rejections_and_recovers() -> None:
    pacer = Pacer(max_delay=1.0)
    assert pacer.wait(0.0) == 0.0
    pacer.rejected(1.0, now=0.0)
    first = pacer.wait(0.0)
    assert first > 0
    pacer.rejected(1.0, now=0.0)
    assert pacer.wait(0.0) > first  # continued pressure: slower
    for _ in range(30):
        pacer.rejected(1.0, now=0.0)
    assert pacer.wait(0.0) <= 1.0  # capped
    for _ in range(20):
        pacer.accepted()
    assert pacer.delay == 0.0


# ---------------------------------------------------------------- retry budget (live)


async def test_a_mass_failure_retries_within_the_budget() -> None:
    cluster = await Cluster.start(backoff=FAST, max_retries=5, retry_budget=0.2,
                                  retry_budget_min=3)
    try:
        async def broken(n: int) -> None:
            raise RuntimeError("database down")

        for name in ("a", "b", "c"):
            await cluster.add_agent(name, {"x.read": broken}, idempotent=True)
        client = await cluster.client()
        results = await asyncio.gather(*(client.call("x.read", {"n": n}) for n in range(40)),
                                       return_exceptions=True)
        assert all(isinstance(r, Unavailable | TaskFailed) for r in results)
        totals = cluster.reach.metrics()["totals"]
        # without a budget: 40 tasks × 5 retries = 200; with it: 3 + 20 % of 40 = 11
        assert totals["retries"] <= 11
        assert totals["calls"] <= 40 + 11
        letters = cluster.reach.dead_letters()
        assert len(letters) == 40
        assert sum("retry budget" in d["error"]["message"] for d in letters) >= 25
    finally:
        await cluster.close()


# ---------------------------------------------------------------- hedged reads


async def test_a_hedge_answers_a_slow_read_from_another_agent() -> None:
    # Hedges spend the retry budget (10 + 20 % of first attempts). Under coverage on a loaded
    # machine the warm-up reads vary so much that many pass their P95 and are hedged: a
    # clean-clone CI spent the budget before the slow read, which then had no hedge.
    cluster = await Cluster.start(backoff=FAST, retry_budget_min=100)
    try:
        runs: dict[str, list[str]] = {}
        slow = asyncio.Event()
        release = asyncio.Event()

        def serve(name: str) -> Any:
            async def read(n: int) -> dict[str, Any]:
                runs.setdefault(str(n), []).append(name)
                if slow.is_set() and len(runs[str(n)]) == 1:
                    await release.wait()  # the first copy hangs; the hedge must answer
                return {"n": n, "by": name}
            return read

        agents = []
        for name in ("a", "b"):
            agent = Agent(name, reconnect_base=0.02)
            # Declared 250 ms: an ordinary read's completion timeout (1.2 × declared) must
            # outlast a loaded CI machine under coverage. At 50 ms a warm-up read and its
            # hedge both timed out at ~75 ms once, and the retry budget was spent.
            agent.capability("x.read", idempotent=True, hedge=True, latency_ms=250)(serve(name))
            await agent.connect(cluster.url)
            cluster.agents.append(agent)
            agents.append(agent)
        client = await cluster.client()
        for n in range(20):  # the P95 the hedge waits for comes from real successes
            await client.call("x.read", {"n": n})
        # (a hedge at P95 hedges about 5 % of ordinary calls too: count from here)
        before = cluster.reach.metrics()["capabilities"]["x.read"]
        slow.set()
        result = await client.call("x.read", {"n": 100}, timeout=3)
        assert result["by"] != runs["100"][0]  # answered by the hedge, at the other agent
        handle_view = next(t for t in cluster.reach.gateway.recent.values()
                           if t.envelope.params == {"n": 100})
        outcomes = sorted(a.outcome for a in handle_view.attempts)
        assert outcomes == ["cancelled", "ok"]
        after = cluster.reach.metrics()["capabilities"]["x.read"]
        assert after["retries"] - before["retries"] == 1
        assert after["faults"] == 0  # the cancelled copy is not held against its agent

        # hedge=False on the call: no second copy, the caller's deadline decides
        with pytest.raises(Exception) as info:
            await client.call("x.read", {"n": 101}, timeout=0.3, hedge=False, max_retries=0)
        assert getattr(info.value, "code", "") == "timeout"
        assert len(runs["101"]) == 1
    finally:
        release.set()
        await cluster.close()


# ---------------------------------------------------------------- dead letters


async def test_a_filtered_replay_completes_a_bad_deploy() -> None:
    cluster = await Cluster.start(max_retries=0)
    try:
        broken = {"on": True}

        async def write(n: int) -> int:
            if broken["on"]:
                raise RuntimeError("column 'qty' does not exist")
            return n

        async def other() -> str:
            raise RuntimeError("unrelated")

        await cluster.add_agent("w", {"orders.write": write}, max_concurrency=100)
        await cluster.add_agent("v", {"x.other": other})
        client = await cluster.client()
        await asyncio.gather(*(client.call("orders.write", {"n": n}) for n in range(30)),
                             return_exceptions=True)
        with pytest.raises(TaskFailed):
            await client.call("x.other", {})
        reach = cluster.reach
        assert len(reach.dead_letters(error="QTY")) == 30
        assert len(reach.dead_letters(capability="x.other")) == 1
        assert len(reach.dead_letters(agent="w")) == 30
        assert reach.dead_letters(agent="nobody") == []
        newest = max(d["dead_since"] for d in reach.dead_letters())
        assert len(reach.dead_letters(since=newest)) >= 1
        assert reach.dead_letters(until=0.0) == []

        broken["on"] = False
        reach.reset_breaker("w")
        ids = reach.replay_many(capability="orders.write", error="qty")
        assert len(ids) == 30
        assert reach.replay_many(capability="orders.write") == []  # already on their way
        await wait_until(lambda: len(reach.dead_letters()) == 1, timeout=5)
        views = [await reach.task(i) for i in ids]
        assert all(v is not None and v["state"] == "succeeded" for v in views)
        assert reach.dead_letters()[0]["capability"] == "x.other"
    finally:
        await cluster.close()


async def test_auto_replay_when_a_capability_gets_a_healthy_agent_again() -> None:
    cluster = await Cluster.start(max_retries=0, auto_replay=True)
    try:
        async def broken() -> None:
            raise RuntimeError("bad deploy")

        async def fixed() -> str:
            return "ok"

        agent = await cluster.add_agent("w", {"x.write": broken})
        client = await cluster.client()
        for _ in range(3):
            with pytest.raises(TaskFailed):
                await client.call("x.write", {})
        assert len(cluster.reach.dead_letters()) == 3
        await agent.close(drain=0.5)
        cluster.agents.remove(agent)
        # the fix is deployed: a new version of the agent registers
        fixed_agent = Agent("w", version="2", reconnect_base=0.02)
        fixed_agent.capability("x.write")(fixed)
        await fixed_agent.connect(cluster.url)
        cluster.agents.append(fixed_agent)
        await wait_until(lambda: cluster.reach.dead_letters() == [], timeout=5)
        assert all(t.state.value == "succeeded" for t in cluster.reach.gateway.recent.values()
                   if t.envelope.capability == "x.write")
    finally:
        await cluster.close()


# ---------------------------------------------------------------- back-pressure


async def test_rejections_carry_a_level_and_the_client_slows_down() -> None:
    cluster = await Cluster.start(queue_wait=0.01)
    try:
        release = asyncio.Event()

        async def hold() -> str:
            await release.wait()
            return "done"

        await cluster.add_agent("one", {"x.hold": hold}, max_concurrency=1)
        client = await cluster.client()
        calls = [asyncio.ensure_future(client.call("x.hold", {}, timeout=5)) for _ in range(6)]
        await wait_until(lambda: sum(c.done() for c in calls) >= 5, timeout=5)
        rejected = [c.exception() for c in calls if c.done()]
        assert all(isinstance(e, Rejected) for e in rejected)
        assert all(0.5 <= e.level <= 1.0 for e in rejected if isinstance(e, Rejected))
        assert client._pacer.wait(asyncio.get_running_loop().time()) > 0
        assert cluster.reach.metrics()["capabilities"]["x.hold"]["rejections"] == 5
        release.set()
        assert "done" in [await c for c in calls if not c.done() or c.exception() is None]
    finally:
        await cluster.close()


# ---------------------------------------------------------------- breakers and deploys


async def test_a_new_version_starts_with_a_closed_breaker_a_reconnect_does_not() -> None:
    cluster = await Cluster.start(max_retries=0, breaker_open_for=60.0)
    try:
        async def broken() -> None:
            raise RuntimeError("boom")

        agent = await cluster.add_agent("w", {"x.write": broken})
        client = await cluster.client()
        for _ in range(5):
            with pytest.raises(TaskFailed):
                await client.call("x.write", {})
        assert cluster.reach.agents()[0]["breaker"] == "open"
        await agent.close(drain=0.5)
        cluster.agents.remove(agent)
        same = Agent("w", reconnect_base=0.02)
        same.capability("x.write")(broken)
        await same.connect(cluster.url)
        assert cluster.reach.agents()[0]["breaker"] == "open"  # same code, same verdict
        await same.close(drain=0.5)
        new = Agent("w", version="2", reconnect_base=0.02)
        new.capability("x.write")(broken)
        await new.connect(cluster.url)
        cluster.agents.append(new)
        assert cluster.reach.agents()[0]["breaker"] == "closed"
    finally:
        await cluster.close()


def test_backoff_jitter_spreads_three_synchronized_failures() -> None:
    rng = random.Random(7)
    delays = [Backoff().delay(0, rng) for _ in range(3)]
    assert len({round(d, 4) for d in delays}) == 3
    assert all(0.4 <= d <= 0.6 for d in delays)


async def test_a_capability_failing_as_a_whole_still_fails_fast() -> None:
    """Waiting for breakers is only for breakers tripped on noise: when most recent attempts
    of the capability failed everywhere, a call with every breaker resting fails at once."""
    cluster = await Cluster.start(max_retries=2, backoff=FAST, breaker_open_for=60.0)
    try:
        async def broken() -> None:
            raise RuntimeError("database down")

        for name in ("a", "b"):
            await cluster.add_agent(name, {"x.read": broken}, idempotent=True)
        client = await cluster.client()
        for _ in range(12):
            with pytest.raises((TaskFailed, Unavailable)):
                await client.call("x.read", {})
        assert {a["breaker"] for a in cluster.reach.agents()} == {"open"}
        async with asyncio.timeout(5):  # far below the 60 s a wait for half-open would take
            with pytest.raises(Unavailable):
                await client.call("x.read", {})
    finally:
        await cluster.close()


async def test_a_write_is_acknowledged_before_it_starts_a_read_within_the_grace() -> None:
    """An unacknowledged attempt that is lost is sent elsewhere: for a write that is only safe
    if it never started, so the agent acknowledges writes at once. Reads answer quickly
    without the extra ack frame (here the grace is made long to tell the two apart)."""
    cluster = await Cluster.start()
    try:
        gate = asyncio.Event()

        async def hang() -> str:
            await gate.wait()
            return "done"

        agent = Agent("a", ack_grace=30.0, reconnect_base=0.02)
        agent.capability("x.write", scope="write")(hang)
        agent.capability("x.read", idempotent=True)(hang)
        await agent.connect(cluster.url)
        cluster.agents.append(agent)
        client = await cluster.client()
        write = await client.submit("x.write", {})
        read = await client.submit("x.read", {})
        reach = cluster.reach
        await wait_until(lambda: reach.gateway.find(write.task_id).state.value == "running")
        assert reach.gateway.find(read.task_id).state.value == "dispatched"
        gate.set()
        assert await write.result(timeout=5) == "done" and await read.result(timeout=5) == "done"
    finally:
        await cluster.close()


async def test_reads_past_the_grace_are_acknowledged_quick_ones_never_are() -> None:
    """One timer serves every read's grace: each slow read is acknowledged once its grace is
    over, a quick one never, and the timer stops when nothing waits."""
    cluster = await Cluster.start()
    try:
        gate = asyncio.Event()

        async def slow() -> str:
            await gate.wait()
            return "slow"

        async def quick() -> str:
            return "quick"

        agent = Agent("a", ack_grace=0.02, reconnect_base=0.02)
        agent.capability("x.slow", idempotent=True)(slow)
        agent.capability("x.quick", idempotent=True)(quick)
        await agent.connect(cluster.url)
        cluster.agents.append(agent)
        client = await cluster.client()
        slow_tasks = [await client.submit("x.slow", {}) for _ in range(3)]
        assert await client.call("x.quick", {}) == "quick"
        reach = cluster.reach
        await wait_until(lambda: all(reach.gateway.find(t.task_id).state.value == "running"
                                     for t in slow_tasks))
        quick_task = next(t for t in reach.gateway.recent.values()
                          if t.envelope.capability == "x.quick")
        assert "acknowledged" not in [note for _, _, note in quick_task.history]
        await wait_until(lambda: agent._ack_timer is None and not agent._acks)
        gate.set()
        assert [await t.result(timeout=5) for t in slow_tasks] == ["slow"] * 3
    finally:
        await cluster.close()


# ---------------------------------------------------------------- answering first


async def test_the_answer_leaves_before_the_bookkeeping_and_the_task_is_whole_at_once() -> None:
    """A result is answered from the agent session's own step; what the caller sees finished
    is finished everywhere: the task, its attempt, its end time."""
    cluster = await Cluster.start()
    try:
        await cluster.add_agent("a", {"x.echo": lambda **p: p})
        client = await cluster.client()
        seen: list[tuple[str, str, bool]] = []
        gateway = cluster.reach.gateway
        answered = gateway.answered

        def spy(task: Any, result: Any) -> None:
            answered(task, result)
            attempt = task.attempts[-1]
            seen.append((task.state.value, attempt.outcome, attempt.ended_at is not None))

        gateway.answered = spy  # type: ignore[method-assign]
        assert await client.call("x.echo", {"n": 1}) == {"n": 1}
        assert seen == [("succeeded", "ok", True)]
    finally:
        await cluster.close()


async def test_a_failure_while_answering_leaves_the_task_to_its_driver() -> None:
    cluster = await Cluster.start()
    try:
        await cluster.add_agent("a", {"x.echo": lambda **p: p})
        client = await cluster.client()

        def broken(task: Any, result: Any) -> None:
            raise RuntimeError("bug in the answer path")

        cluster.reach.gateway.dispatch.answered = broken
        assert await client.call("x.echo", {"n": 1}) == {"n": 1}  # the driver answered
        assert await client.call("x.echo", {"n": 2}) == {"n": 2}  # the agent session lives
    finally:
        await cluster.close()


async def test_a_losing_streaming_hedge_leaves_nothing_behind_the_answer() -> None:
    """The answer finishes the task while the losing copy may still stream: its chunks are
    dropped, and no per-task state outlives the task (found in review)."""
    cluster = await Cluster.start()
    try:
        runs: dict[int, list[str]] = {}
        slow = asyncio.Event()

        def serve(name: str) -> Any:
            async def read(n: int) -> Any:
                runs.setdefault(n, []).append(name)
                if slow.is_set() and len(runs[n]) == 1:  # the first copy streams on
                    for i in range(200):
                        yield {"i": i, "by": name}
                        await asyncio.sleep(0.0005)
                    return
                yield {"n": n, "by": name}
            return read

        for name in ("a", "b"):
            agent = Agent(name, reconnect_base=0.02)
            # Declared 250 ms: an ordinary read's completion timeout (1.2 × declared) must
            # outlast a loaded CI machine under coverage. At 50 ms a warm-up read and its
            # hedge both timed out at ~75 ms once, and the retry budget was spent.
            agent.capability("x.read", idempotent=True, hedge=True, latency_ms=250)(serve(name))
            await agent.connect(cluster.url)
            cluster.agents.append(agent)
        client = await cluster.client()
        for n in range(20):  # successes give the P95 the hedge waits for
            await client.call("x.read", {"n": n})
        slow.set()
        for n in range(100, 105):
            await client.call("x.read", {"n": n}, timeout=3)
        gateway = cluster.reach.gateway
        await wait_until(lambda: not gateway._drivers)  # the losers are cancelled
        await asyncio.sleep(0.05)  # chunks still in flight arrive
        assert not [t for t in gateway.book._chunk_next if t not in gateway.live]
    finally:
        await cluster.close()


async def test_closing_an_agent_stops_its_ack_timer() -> None:
    """An agent object outlives its loop in notebooks and tests: a timer left armed on a
    dead loop would keep every later read from being acknowledged (found in review)."""
    cluster = await Cluster.start()
    try:
        gate = asyncio.Event()

        async def slow() -> str:
            await gate.wait()
            return "slow"

        agent = Agent("a", ack_grace=30.0, reconnect_base=0.02)
        agent.capability("x.slow", idempotent=True)(slow)
        await agent.connect(cluster.url)
        client = await cluster.client()
        task = await client.submit("x.slow", {})
        await wait_until(lambda: agent._ack_timer is not None)
        gate.set()
        assert await task.result(timeout=5) == "slow"
        await agent.close(drain=0.5)
        assert agent._ack_timer is None and not agent._acks
    finally:
        await cluster.close()


async def test_a_task_that_comes_back_to_the_slot_queue_stays_queued() -> None:
    """Issue 10, item 9: a resumed task queued while its agent was full, whose agent dropped
    and came back within ``recovery_grace``, re-entered ``_acquire`` and moved queued -> queued:
    ``InvalidTransition``, dead-lettered as "internal error". Here the second wait for a slot
    is taken directly: it must end as a plain ``Rejected`` with the task still queued."""
    import time as _time

    from reach.core.life import Pick
    from reach.core.tasks import Envelope, TaskState, new_task
    from reach.errors import Rejected
    from reach.testing import Cluster

    cluster = await Cluster.start(queue_wait=0.02)
    try:
        gate = asyncio.Event()

        async def hold() -> str:
            await gate.wait()
            return "done"

        await cluster.add_agent("busy", {"work.hold": hold}, max_concurrency=1)
        client = await cluster.client()
        first = await client.submit("work.hold")
        gateway = cluster.reach.gateway
        busy = cluster.reach.registry.by_name["busy"]
        for _ in range(200):
            if busy.inflight == 1:
                break
            await asyncio.sleep(0.005)
        now = _time.time()
        task = new_task(Envelope(task_id="t-requeued", trace_id="tr-requeued",
                                 capability="work.hold", params={}, caller="test",
                                 idempotency_key="k-requeued", created_at=now,
                                 queue_wait=0.2, fail_fast=True), now)  # a call's
        task.move(TaskState.QUEUED, now, "waiting for a free slot")  # its first wait
        with pytest.raises(Rejected):
            await gateway.driver._acquire(task, Pick(frozenset(), None))
        assert task.state is TaskState.QUEUED
        gate.set()
        assert await first.result(5) == "done"
    finally:
        await cluster.close()
