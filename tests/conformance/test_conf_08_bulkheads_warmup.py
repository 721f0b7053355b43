"""docs/protocol.md §7 and §8, issue 13: a capability's ``warmup_s`` and ``max_concurrency``
as a raw agent declares them, latency tiers as bulkheads, and shedding as a caller sees it
(``rejected`` with ``details.shed``), all over raw websockets."""

from __future__ import annotations

from conftest import BEAT
from docpage import section
from rawpeer import agent, answer, caller, submit

from reach import Reach


def test_the_page_lists_the_new_capability_fields_and_rules() -> None:
    spec = section("## 7. The capability spec", "\n## 8.")
    assert "| `warmup_s` |" in spec and "| `max_concurrency` |" in spec
    rules = section("## 8. Timeouts, retries and fail-over", "\n## 9.")
    for rule in ("**Shedding.**", "**Bulkheads.**", "**Warm-up.**", "`details.shed: true`"):
        assert rule in rules, rule


async def test_a_declared_warm_up_shows_in_the_agent_view(reach: Reach) -> None:
    await agent(reach.url, "cold-raw", [{"name": "conf.cold", "warmup_s": 30}])
    await agent(reach.url, "none-raw", [{"name": "conf.none", "warmup_s": 0}])
    views = {a["name"]: a for a in reach.agents()}
    assert views["cold-raw"]["warming"] is True
    assert 0.1 <= views["cold-raw"]["warm_share"] < 0.2
    assert views["none-raw"]["warming"] is False and views["none-raw"]["warm_share"] == 1.0


async def test_a_capability_max_concurrency_limits_its_invokes() -> None:
    async with Reach.start(heartbeat_interval=BEAT, queue_wait=5.0) as reach:
        await _limited(reach)


async def _limited(reach: Reach) -> None:
    worker = await agent(reach.url, "limited-raw", [
        {"name": "conf.heavy", "max_concurrency": 1}, {"name": "conf.light"}],
        max_concurrency=4)
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.heavy"))
    first = await worker.expect("invoke")
    await boss.send(submit(2, "conf.heavy"))  # its own limit is reached: not sent
    await boss.send(submit(3, "conf.light"))  # the agent still has slots for others
    light = await worker.expect("invoke")
    assert light["capability"] == "conf.light"
    await answer(worker, light, "light")
    assert (await boss.outcome(3))["result"] == "light"
    await answer(worker, first, "heavy")
    second = await worker.expect("invoke")  # once the first is done, the queued one
    assert second["capability"] == "conf.heavy"
    await answer(worker, second, "heavy again")
    assert (await boss.outcome(2))["result"] == "heavy again"


async def test_a_long_tier_leaves_slots_for_a_fast_one(reach: Reach) -> None:
    worker = await agent(reach.url, "tiers-raw", [
        {"name": "conf.report", "latency_ms": 40000}, {"name": "conf.price",
                                                       "latency_ms": 200}],
        max_concurrency=2)
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.report"))
    report = await worker.expect("invoke")
    # the long tier's share (1 of 2) is taken: a call is rejected after queue_wait (a
    # submit would wait its turn, §8 the backlog)
    await boss.send(submit(2, "conf.report", defer_ack=True))
    error = (await boss.outcome(2))["error"]
    assert error["code"] == "rejected" and "shed" not in error["details"], error
    await boss.send(submit(3, "conf.price"))
    price = await worker.expect("invoke")
    assert price["capability"] == "conf.price"
    await answer(worker, price, 1.5)
    assert (await boss.outcome(3))["result"] == 1.5
    await answer(worker, report, "done")


async def test_low_priority_is_shed_at_once_above_the_high_water_mark(reach: Reach) -> None:
    worker = await agent(reach.url, "shed-raw", [{"name": "conf.batch"}], max_concurrency=5)
    boss = await caller(reach.url)
    invokes = []
    for i in range(4):  # 4 of 5 slots: the high-water mark
        await boss.send(submit(i + 1, "conf.batch", priority=2))
        invokes.append(await worker.expect("invoke"))
    await boss.send(submit(9, "conf.batch", priority=2))
    error = (await boss.outcome(9))["error"]
    assert error["code"] == "rejected" and error["details"]["shed"] is True, error
    assert 0.5 <= error["details"]["level"] <= 1.0
    await boss.send(submit(10, "conf.batch"))  # the default priority 5 takes the last slot
    kept = await worker.expect("invoke")
    await answer(worker, kept, "kept")
    assert (await boss.outcome(10))["result"] == "kept"
    for invoke in invokes:
        await answer(worker, invoke, "ok")
