"""Drill: slow work fills an agent that also serves fast work; and overload sheds low priority."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from subprocs import agent_view

from reach import Rejected
from reach.testing import Cluster, wait_until

SLOW, FAST = "report.build", "price.get"


def handlers(release: asyncio.Event, running: list[str]) -> dict[str, Callable[..., Any]]:
    async def build(n: int) -> dict[str, Any]:
        running.append(SLOW)
        await release.wait()  # a 40 s analysis, scaled: runs until the test releases it
        return {"report": n}

    async def price(n: int) -> dict[str, Any]:
        await asyncio.sleep(0.002)
        return {"price": n}

    return {SLOW: build, FAST: price}


async def test_slow_calls_fill_their_share_and_fast_calls_are_never_rejected(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "A 30 s one-size timeout: a 40 s analysis agent filled the caller's thread pool,
    200 ms calls died too" → "timeout classes (fast / normal / long), isolated pools", and
    "40 s feature jobs starved an 8-thread shared pool" → "bulkheads by expected duration".
    Scaled: one agent, ``max_concurrency=4``, serves a long capability (declared 40 s) and a
    fast one (200 ms). Six slow calls arrive: three run (the long tier's share: 4 − 1 slot
    kept for the fast tier), the rest wait out ``queue_wait`` and are ``rejected``. Meanwhile
    forty fast calls, two at a time, all succeed: none is ``Rejected``. The control (both
    capabilities declared at the same latency: one tier, one pool, as before) reproduces the
    incident: four slow calls take every slot and a fast call is rejected."""
    cluster = await cluster_factory(suspect_after=6, offline_after=12)
    reach = cluster.reach
    release = asyncio.Event()
    running: list[str] = []
    await cluster.add_agent("analysis", handlers(release, running), max_concurrency=4,
                            idempotent=True,
                            each={SLOW: {"latency_ms": 40_000}, FAST: {"latency_ms": 200}})
    client = await cluster.client("dashboard")
    try:
        slow = [asyncio.create_task(client.call(SLOW, {"n": i})) for i in range(6)]
        await wait_until(lambda: len(running) == 3)
        view = agent_view(reach, "analysis")
        assert view is not None and view["inflight"] == 3, view  # its share, not all four

        async def fast_caller(k: int) -> list[Any]:
            return [await client.call(FAST, {"n": k * 100 + i}, timeout=5) for i in range(20)]

        answers = await asyncio.gather(fast_caller(0), fast_caller(1), return_exceptions=True)
        for answer in answers:
            assert not isinstance(answer, BaseException), answer  # never Rejected
        assert sorted(a["price"] for batch in answers for a in batch) == sorted(
            k * 100 + i for k in range(2) for i in range(20))
        # The slow calls past their share waited and were rejected; the three kept running.
        await wait_until(lambda: sum(t.done() for t in slow) == 3)
        for task in (t for t in slow if t.done()):
            assert isinstance(task.exception(), Rejected), task.exception()
        assert len(running) == 3
        release.set()
        finished = await asyncio.gather(*slow, return_exceptions=True)
        assert sum(1 for r in finished if isinstance(r, dict)) == 3
    finally:
        release.set()

    # Control: one tier (both declared 40 s), one pool: the slow calls take every slot.
    # (Declared at 1 s, the held calls timed out after 1.2 s and gave their slots back, so
    # a host that took that long to reach the fast call saw it run.)
    release2 = asyncio.Event()
    running2: list[str] = []
    await cluster.add_agent("one-pool", {f"{c}2": fn for c, fn in
                                         handlers(release2, running2).items()},
                            max_concurrency=4, idempotent=True, latency_ms=40_000)
    try:
        slow2 = [asyncio.create_task(client.call(f"{SLOW}2", {"n": i})) for i in range(4)]
        await wait_until(lambda: len(running2) == 4)
        try:
            await client.call(f"{FAST}2", {"n": 1}, timeout=5)
        except Rejected:
            pass
        else:
            raise AssertionError("the control should reproduce the incident")
    finally:
        release2.set()
    await asyncio.gather(*slow2, return_exceptions=True)


async def test_under_overload_low_priority_is_shed_first_and_high_priority_gets_through(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "Quota: wait ≤ 200 ms, then QUOTA_EXCEEDED" rejected every priority alike; the
    issue asks to "shed the lowest priorities first above a high-water mark". Scaled: one
    agent with ten slots; twelve low-priority (1) slow calls arrive. Eight run (the high-water
    mark, 80 %); the other four are shed at once: ``rejected`` with the back-pressure level and
    ``shed``, never queued. Then high-priority calls (the default 5, and 9) still find the two
    slots kept for them and succeed while the low-priority work goes on. The job declares a
    minute, as slow batch work would: declared at 500 ms, its held calls timed out after
    0.6 s, gave their slots back, and a loaded host that took that long to reach the last
    call saw it run (seen once in CI; a 0.7 s wait there reproduces it every time)."""
    cluster = await cluster_factory(suspect_after=6, offline_after=12)
    release = asyncio.Event()
    running: list[int] = []

    async def job(n: int, wait: bool) -> dict[str, Any]:
        running.append(n)
        if wait:
            await release.wait()
        return {"n": n}

    await cluster.add_agent("batch", {"job.run": job}, max_concurrency=10, latency_ms=60_000)
    client = await cluster.client("scheduler")
    try:
        low = [await client.submit("job.run", {"n": i, "wait": True}, priority=1,
                                   idempotency_key=f"low-{i}") for i in range(12)]
        await wait_until(lambda: len(running) == 8)
        outcomes = await asyncio.gather(*(h.result(timeout=0.1) for h in low),
                                        return_exceptions=True)
        shed = [(h, o) for h, o in zip(low, outcomes, strict=True) if isinstance(o, Rejected)]
        assert len(shed) == 4, outcomes  # the rest still run (timing out our short wait)
        for handle, error in shed:
            assert error.details.get("shed") is True and 0.5 <= error.level <= 1.0, error
            view = await client.status(handle.task_id)
            states = [h["state"] for h in view["history"]]
            assert "queued" not in states and not view["attempts"], view  # refused at once
        assert len(running) == 8
        high = await asyncio.gather(
            client.call("job.run", {"n": 100, "wait": False}, timeout=5),
            client.call("job.run", {"n": 101, "wait": False}, priority=9, timeout=5),
            client.call("job.run", {"n": 102, "wait": False}, priority=5, timeout=5))
        assert [r["n"] for r in high] == [100, 101, 102]
        # A low-priority call is still shed while the low-priority work fills its part.
        try:
            await client.call("job.run", {"n": 200, "wait": False}, priority=0, timeout=5)
        except Rejected as exc:
            assert exc.details.get("shed") is True
        else:  # (what the coordinator saw, should a loaded host ever make this fail)
            raise AssertionError("a priority-0 call should be shed above the high-water mark; "
                                 f"running {len(running)}, agents {cluster.reach.agents()}")
    finally:
        release.set()
