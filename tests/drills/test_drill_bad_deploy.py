"""Drill: a bad deploy dead-letters hundreds of tasks; one filtered replay completes them."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable

import pytest
from conftest import Runs

from reach import Context, ReachError
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until

CAP = "report.write"
OTHER = "mail.send"
TASKS = 200


async def test_bad_deploy_dead_letters_are_completed_by_one_filtered_replay(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "A bad SQL deploy: hundreds of tasks failed after all retries." Lesson: a
    dead-letter queue keeping the whole task, and a filtered bulk replay after the fix.

    200 non-idempotent report writes fail while a broken deploy is live (the handler raises a
    plain exception; the agents' breakers open, so later ones wait in the backlog for a
    healthy agent, up to ``max_wait``, then are dead letters too: 0.5 s here, scaled). Other dead letters sit beside them: one of the same capability from before the
    deploy, and a few of another capability during it. After the fix (and the operator's
    breaker reset), one ``replay_many`` filtered by capability and the deploy's time window
    starts exactly the 200, every one succeeds, each write is done once, and the unrelated
    letters stay where they were."""
    await bad_deploy_then_replay(cluster_factory, reset_breakers=True)


async def test_bad_deploy_replay_after_the_breakers_open_period_without_a_manual_reset(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """The same incident, without the operator's breaker reset: the fix is live and the
    breakers' open period is over, so the replay's first dispatch to each agent is its
    half-open probe. The other replayed tasks find no agent for a moment and back off
    (50 ms); by then the probes have closed the breakers. Every replayed task should
    complete."""
    await bad_deploy_then_replay(cluster_factory, reset_breakers=False)


async def bad_deploy_then_replay(cluster_factory: Callable[..., Awaitable[Cluster]], *,
                                 reset_breakers: bool) -> None:
    open_for = 0.3
    # Liveness is not this drill's subject: wider thresholds keep a busy loop's late beats
    # from suspecting an agent mid-submit, and a 2 s ack timeout (not 0.5) keeps 200 replayed
    # invokes queued on a loaded machine from counting as unacknowledged: the deploy spent the
    # retry budget, so one such retry dead-letters the task again (`make test`, once).
    cluster = await cluster_factory(max_retries=2, breaker_open_for=open_for, max_wait=0.5,
                                    suspect_after=20, offline_after=40, ack_timeout=2.0,
                                    backoff=Backoff(base=0.05, cap=0.1))
    reach = cluster.reach
    broken = {"on": False}
    runs = Runs()
    done: collections.Counter[str] = collections.Counter()

    def writer(name: str) -> Callable[..., Awaitable[str]]:
        async def write(report: int, ctx: Context) -> str:
            runs.start(ctx.idempotency_key, name)
            await asyncio.sleep(0.002)
            if broken["on"]:
                raise RuntimeError("bad SQL deploy: column reports.region does not exist")
            done[ctx.idempotency_key] += 1
            return f"report {report} written by {name}"
        return write

    async def refuse(to: str) -> str:
        raise RuntimeError("smtp relay refused the connection")

    for name in ("reports-1", "reports-2"):
        await cluster.add_agent(name, {CAP: writer(name)}, scope="write",
                                max_concurrency=TASKS, latency_ms=1000)
    await cluster.add_agent("mailer", {OTHER: refuse}, scope="write")
    client = await cluster.client("nightly")

    # An older dead letter of the same capability, from an earlier incident.
    broken["on"] = True
    with pytest.raises(ReachError):
        await client.call(CAP, {"report": -1}, idempotency_key="old-incident")
    await asyncio.sleep(0.01)
    deploy_at = time.time()

    # The bad deploy: 200 writes (and a few mails) go dead.
    # (The mails go first: 200 failing writes keep this one process busy enough that the
    # mailer's 50 ms heartbeats can fall behind and it is briefly suspected.)
    mails = [await client.submit(OTHER, {"to": f"ops{i}"}, idempotency_key=f"m{i}")
             for i in range(5)]
    handles = [await client.submit(CAP, {"report": i}, idempotency_key=f"r{i}")
               for i in range(TASKS)]
    outcomes = await asyncio.gather(*(h.result(timeout=10) for h in handles + mails),
                                    return_exceptions=True)
    assert all(isinstance(o, ReachError) for o in outcomes), outcomes
    fixed_at = time.time()
    letters = reach.dead_letters(capability=CAP, since=deploy_at, until=fixed_at)
    assert {d["task_id"] for d in letters} == {h.task_id for h in handles}
    assert reach.dead_letters(error="bad SQL deploy")  # the cause is kept with the letters
    assert len(reach.dead_letters(capability=OTHER)) == 5
    assert done == {}
    reached = sum(1 for key in runs.started if key.startswith("r"))

    # The fix, then one filtered replay.
    broken["on"] = False
    if reset_breakers:
        for name in ("reports-1", "reports-2"):
            reach.reset_breaker(name)
    else:
        await asyncio.sleep(open_for + 0.05)
    ids = reach.replay_many(capability=CAP, since=deploy_at, until=fixed_at)
    assert sorted(ids) == sorted(h.task_id for h in handles)

    results = await asyncio.gather(*(client.result(tid, timeout=10) for tid in ids))
    assert sorted(int(r.split()[1]) for r in results) == list(range(TASKS))
    for handle in handles:
        view = await reach.task(handle.task_id)
        assert view is not None and view["state"] == "succeeded", view
    await wait_until(lambda: reach.dead_letters(capability=CAP, since=deploy_at) == [])

    # Each write done exactly once; the unrelated letters were left alone.
    assert done == {f"r{i}": 1 for i in range(TASKS)}, \
        {k: c for k, c in done.items() if c != 1}
    remaining = reach.dead_letters()
    assert {d["envelope"]["idempotency_key"] for d in remaining} == \
        {"old-incident"} | {f"m{i}" for i in range(5)}
    print(f"\nbad deploy: {TASKS} dead letters ({reached} had reached an agent before the breakers opened); one replay_many completed all; "
          f"{len(remaining)} unrelated letters left")
