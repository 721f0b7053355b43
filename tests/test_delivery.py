"""Delivery timers: ack vs completion deadlines, and forgiveness when the loop itself stalled."""

from __future__ import annotations

import asyncio
import time

from reach.gateway.clock import LoopClock
from reach.gateway.delivery import Delivery


async def outcome_of(delivery: Delivery) -> str:
    kind, _ = await asyncio.wait_for(delivery.fut, 2)
    return kind


async def test_never_acknowledged_is_undelivered() -> None:
    delivery = Delivery(LoopClock(), 0.01, 1.0, None)
    assert await outcome_of(delivery) == "undelivered"


async def test_acknowledged_but_slow_is_a_timeout() -> None:
    delivery = Delivery(LoopClock(), 0.01, 0.05, None)
    delivery.ack()
    assert await outcome_of(delivery) == "timeout"


async def test_completion_before_the_ack_deadline_is_a_timeout_not_undelivered() -> None:
    delivery = Delivery(LoopClock(), 1.0, 0.01, None)
    assert await outcome_of(delivery) == "timeout"


async def test_ack_deadline_passes_quietly_once_acknowledged() -> None:
    acks: list[bool] = []
    delivery = Delivery(LoopClock(), 0.01, 0.2, None, lambda: acks.append(True))
    delivery.ack()
    await asyncio.sleep(0.05)
    assert not delivery.fut.done() and acks == [True]
    delivery.resolve("ok", 42)
    assert await delivery.fut == ("ok", 42)


async def test_a_stalled_loop_gets_one_grace_period() -> None:
    loop = asyncio.get_running_loop()
    delivery = Delivery(LoopClock(), 1.0, 0.02, None)
    delivery.ack()
    time.sleep(0.1)  # the coordinator stalls (a GC pause) past the deadline
    loop.call_later(0.01, delivery.resolve, "ok", "late but fine")  # the answer was waiting
    assert await delivery.fut == ("ok", "late but fine")


async def test_the_grace_period_is_given_once() -> None:
    delivery = Delivery(LoopClock(), 1.0, 0.02, None)
    delivery.ack()
    time.sleep(0.06)
    assert await outcome_of(delivery) == "timeout"
