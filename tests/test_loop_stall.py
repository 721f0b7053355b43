"""A coordinator that stood still (a long GC pause, a blocking call in a handler, a host that
descheduled it) does not blame its agents for its own silence: beats sent meanwhile wait
unread in its sockets, and they are read before anyone is judged offline."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from reach import Agent, Reach
from reach.core.liveness import StallGuard
from reach.gateway.events import AGENT

BEAT = 0.05
OPTIONS = dict(heartbeat_interval=BEAT, suspect_after=4, offline_after=6, http_port=None,
               warmup=0.0)


def echo(name: str) -> Agent:
    agent = Agent(name)

    @agent.capability("text.echo", idempotent=True)
    async def run(text: str) -> dict[str, str]:
        return {"text": text}

    return agent


async def test_a_stall_of_the_coordinators_own_loop_marks_no_agent_offline_or_suspected() -> None:
    async with Reach.start(**OPTIONS) as reach, echo("steady").connect(reach.url):
        states: list[str] = []
        reach.events.listen(lambda e: states.append(e.data["state"]) if e.kind == AGENT
                            else None)
        for _ in range(3):
            time.sleep(BEAT * 10)  # the whole process stands still for 10 beats
            await asyncio.sleep(BEAT * 2)
        assert states == []  # neither offline nor even suspected, for a moment
        assert reach.agents()[0]["state"] == "online"


async def test_a_loop_that_stays_overloaded_still_judges_a_silent_agent_offline() -> None:
    async with Reach.start(**OPTIONS) as reach, websockets.connect(reach.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "register", "name": "mute",
                                  "capabilities": [{"name": "text.echo"}]}))
        json.loads(await ws.recv())  # registered; it never beats again
        loop = asyncio.get_running_loop()
        busy = True

        def hog() -> None:  # every tick of the sweep comes late, for as long as it runs
            time.sleep(BEAT / 2)
            if busy:
                loop.call_soon(hog)

        hog()
        try:
            async with asyncio.timeout(5):
                while reach.agents()[0]["state"] != "offline":
                    await asyncio.sleep(0.01)
        finally:
            busy = False


@pytest.mark.parametrize("late", [0.0, 0.01, 0.1])
def test_a_tick_on_time_judges_and_clears_the_wait(late: float) -> None:
    guard = StallGuard(period=0.1, patience=1.0)
    assert guard.may_judge(due=5.0, now=5.0 + late)
    assert not guard.may_judge(due=6.0, now=6.5)  # half a second late: wait
    assert guard.may_judge(due=6.6, now=6.6 + late)  # on time again: judge
    assert not guard.may_judge(due=7.0, now=7.5)  # a new stall waits afresh


def test_late_ticks_wait_at_most_the_patience_then_judge_every_tick() -> None:
    guard = StallGuard(period=0.1, patience=1.0)
    waits = [guard.may_judge(due=t, now=t + 0.3) for t in (10.0, 10.4, 10.8, 11.2, 11.6)]
    assert waits == [False, False, False, True, True]
