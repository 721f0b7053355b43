"""Drill: a cold agent joins a busy capability; its share ramps up instead of jumping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from subprocs import agent_view

from reach.testing import Cluster

CAP = "model.score"
WARMUP = 1.8  # the new agent's warm-up, seconds (declared by its capability)
BUCKETS = 3  # the warm-up period cut in three, for the curve
WORKERS = 4


async def test_a_new_agent_gets_a_small_rising_share_while_it_warms_up(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field (issue 13): "A newly connected agent got 9 of the first 20 calls at once (cold
    caches, JIT, model load)". Scaled: a warm agent serves a steady stream of calls (four
    callers in a loop); a second agent joins declaring ``warmup_s`` = 1.8 s. Of the first 20
    calls after it joins it gets a few (far fewer than 9: its share starts at 10 % of its
    normal one); its share rises from one third of the warm-up's calls to the next;
    ``reach.agents()`` says it is warming, with its warm share; afterwards it gets its normal
    share (about half)."""
    # Liveness is not under test: a beat missed on a busy machine would make the agent
    # suspected, and coming back online starts a new warm-up (as it should). Suspected only
    # after 2 s of silence: with 6 beats of 50 ms (0.3 s) a clean-clone CI run saw the cold
    # agent's warm share fall back (0.578, then 0.4) as a stall under coverage restarted it.
    cluster = await cluster_factory(seed=13, heartbeat_interval=0.2, suspect_after=10,
                                    offline_after=20)
    reach = cluster.reach

    def serve(name: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        async def score(i: int) -> dict[str, Any]:
            await asyncio.sleep(0.002)
            return {"agent": name, "i": i}
        return score

    # The first agent declares a short warm-up of its own and is warm by the time the second
    # joins (an only candidate gets all the work while it warms: it serves every call).
    await cluster.add_agent("warm", {CAP: serve("warm")}, idempotent=True, latency_ms=50,
                            warmup_s=0.05)
    client = await cluster.client("ranker")
    calls: list[tuple[float, str]] = []  # (started, agent that answered)
    stop = asyncio.Event()

    async def worker(w: int) -> None:
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            result = await client.call(CAP, {"i": w * 100_000 + n}, timeout=5)
            calls.append((started, result["agent"]))
            n += 1

    workers = [asyncio.create_task(worker(w)) for w in range(WORKERS)]
    try:
        await asyncio.sleep(0.15)
        assert calls and all(agent == "warm" for _, agent in calls)
        await cluster.add_agent("cold", {CAP: serve("cold")}, idempotent=True, latency_ms=50,
                                warmup_s=WARMUP)
        joined = time.monotonic()
        view = agent_view(reach, "cold")
        assert view is not None and view["warming"] is True, view
        assert 0.1 <= view["warm_share"] < 0.5, view
        samples = [view["warm_share"]]
        # Past the warm-up by 0.6 of it, and until 60 calls started after it ended plus a
        # margin (a host that stands still for a second must not leave that window empty),
        # 10 s at most.
        after = joined + WARMUP + 0.05
        while time.monotonic() < joined + WARMUP * 1.6 \
                or sum(1 for t, _ in calls if t >= after) < 60:
            assert time.monotonic() < joined + 10, "calls stopped coming"
            await asyncio.sleep(WARMUP / BUCKETS)
            cold = agent_view(reach, "cold")
            assert cold is not None
            samples.append(cold["warm_share"])
        stop.set()
        await asyncio.gather(*workers)
    finally:
        stop.set()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    after_join = [(t - joined, agent) for t, agent in calls if t >= joined]
    first = [agent for _, agent in after_join[:20]]
    assert len(first) == 20
    assert first.count("cold") <= 5, first  # not 9 of 20

    def share(inside: list[str]) -> tuple[float, int]:
        return (inside.count("cold") / len(inside) if inside else 0.0), len(inside)

    # The warm-up's calls, in the order they started, cut in three equal counts: a rising
    # share from one third to the next. (Thirds of the period by the clock would leave one
    # nearly empty when the host stands still: a CI run saw 401, 4 and 267 calls after a
    # 0.77 s stall of the whole process.)
    during = [agent for t, agent in after_join if t < WARMUP]
    size = len(during) // BUCKETS
    curve = [share(during[k * size:(k + 1) * size]) for k in range(BUCKETS)]
    normal, n_after = share([agent for t, agent in after_join if t >= WARMUP + 0.05])
    print(f"\nwarm-up: cold agent got {first.count('cold')} of the first 20 calls; share per "
          f"third of the warm-up's calls {[round(s, 2) for s, _ in curve]} "
          f"(calls {[n for _, n in curve]}), then {normal:.2f} of {n_after}; "
          f"warm_share seen {samples}")
    assert all(n >= 30 for _, n in curve) and n_after >= 30, (curve, n_after)
    shares = [s for s, _ in curve]
    # A rising curve: each third above the one before (give or take 0.05 of sampling noise,
    # 150 calls a third), and the last well above the first.
    assert all(b >= a - 0.05 for a, b in zip(shares, shares[1:])), curve
    assert shares[-1] - shares[0] >= 0.1, curve
    assert shares[0] < 0.6 * normal, (curve, normal)  # it starts small ...
    assert 0.3 <= normal <= 0.7, normal  # ... and ends with its normal share, about half
    assert samples[-1] == 1.0 and samples == sorted(samples), samples
    final = agent_view(reach, "cold")
    assert final is not None and final["warming"] is False
