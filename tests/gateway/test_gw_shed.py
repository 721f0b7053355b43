"""Priority shedding in the gateway (issue 13, item 3): above an agent's high-water mark a task
below ``shed_below`` is rejected at once, never queued, while higher priorities take the slots
kept for them; with every slot taken, every priority waits as before."""

from __future__ import annotations

from test_decisions import Rig

from reach.errors import Rejected
from reach.gateway.driver import _ready
from reach.wire.protocol import CapabilitySpec

S_FAILED, S_QUEUED = "failed", "queued"


def states(task) -> list[str]:  # type: ignore[no-untyped-def]
    return [s for s, _, _ in task.history]


async def test_below_shed_below_a_task_is_shed_at_the_high_water_mark() -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", max_concurrency=5)  # high water: 4 of 5 slots
        low = [await rig.submit(priority=1) for _ in range(4)]
        assert record.inflight == 4 and len(link.delivered) == 4
        shed = await rig.submit(priority=4)
        assert shed.state.value == S_FAILED and S_QUEUED not in states(shed), shed.history
        assert shed.error is not None and shed.error["code"] == "rejected"
        assert shed.error["details"]["shed"] is True
        assert 0.5 <= shed.error["details"]["level"] <= 1.0
        assert not shed.attempts
        high = await rig.submit(priority=5)  # the default priority gets the kept slot
        assert high.attempts and record.inflight == 5
        for task in low + [high]:
            link.finish(task.task_id, "ok", 1)
        await rig.clock.settle()
    finally:
        await rig.close()


async def test_with_every_slot_taken_a_low_priority_task_waits_and_a_shed_waiter_passes_on_the_wake(
        ) -> None:
    rig = Rig()
    try:
        record, link = rig.agent("a", max_concurrency=5)
        busy = [await rig.submit(priority=9) for _ in range(5)]
        assert record.inflight == 5
        low = await rig.submit(priority=1)  # full, not above a reserve: it queues
        assert low.state.value == S_QUEUED
        await rig.clock.advance(0.18)  # aged: 1 + 0.18 × 50 > 9, it is woken first
        high = await rig.submit(priority=9)
        assert high.state.value == S_QUEUED
        link.finish(busy[0].task_id, "ok", 1)  # one slot: above high water for priority 1
        await rig.clock.settle()
        assert low.state.value == S_FAILED and low.error is not None
        assert low.error["details"]["shed"] is True
        # The wake the shed waiter took went on to the next one, at once.
        assert high.attempts and record.inflight == 5, high.history
        for task in busy[1:] + [high]:
            link.finish(task.task_id, "ok", 1)
        await rig.clock.settle()
    finally:
        await rig.close()


async def test_a_low_priority_task_uses_an_agent_below_its_high_water_mark() -> None:
    rig = Rig()
    try:
        busy_rec, busy_link = rig.agent("busy", max_concurrency=5)
        for _ in range(4):
            await rig.submit(priority=9)
        # (the weighted default sends the first four to one agent while it is alone)
        free_rec, free_link = rig.agent("free", max_concurrency=5)
        low = await rig.submit(priority=0)
        assert low.attempts and low.attempts[0].agent == "free"
        assert free_rec.inflight == 1 and busy_rec.inflight == 4
    finally:
        await rig.close()


async def test_a_slot_ready_check_respects_the_bulkhead() -> None:
    rig = Rig()
    try:
        record = rig.registry.register(
            agent_id="id-m", name="m", version="1", max_concurrency=4,
            specs=[CapabilitySpec(name="report.build", latency_ms=40_000),
                   CapabilitySpec(name="price.get", latency_ms=200)],
            link=None, now=rig.clock.wall()).record
        for _ in range(3):
            record.take("report.build")
        assert not _ready(record, "report.build") and _ready(record, "price.get")
        assert not _ready(record, "other.cap")
    finally:
        await rig.close()


def test_rejected_carries_shed() -> None:
    assert Rejected("x", level=0.7, shed=True).details["shed"] is True
