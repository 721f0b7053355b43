"""The agent SDK answers probes from its serving path (reach.sdk.serving): a probe waits for a
handler slot as an invoke does and runs the agent's ``@agent.probe`` check where a handler
runs, so a full or wedged agent answers late; a failing check answers ``ok: false``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from reach import Agent, Client, Reach
from reach.errors import ReachError
from reach.testing import wait_until
from reach.wire import protocol as p

PROBING: dict[str, Any] = {"heartbeat_interval": 0.05, "probe_interval": 0.05,
                           "probe_slow": 0.03, "offline_after": 100}


def view(reach: Reach, name: str) -> dict[str, Any]:
    return next(a for a in reach.agents() if a["name"] == name)


async def test_a_probe_waits_for_the_handler_slot_real_work_holds() -> None:
    """One slot, held by a handler the coordinator gave up on (its call timed out): the
    probes wait behind it, go slow, and suspect the agent; freeing the slot restores it."""
    async with Reach.start(**PROBING) as reach:
        agent = Agent("one-slot", max_concurrency=1, reconnect_base=0.02)
        gate = asyncio.Event()

        @agent.capability("job.stuck", latency_ms=20)
        async def stuck() -> str:
            await gate.wait()
            return "done"

        async with agent.connect(reach.url), Client.connect(reach.url) as client:
            await wait_until(lambda: (view(reach, "one-slot")["probe"] or {})
                             .get("last_ok") is True)
            with pytest.raises(ReachError):
                await client.call("job.stuck", {}, timeout=2)  # timed out: slot still held
            await wait_until(lambda: view(reach, "one-slot")["state"] == "suspected")
            assert view(reach, "one-slot")["suspected_by"] == "probe"
            gate.set()
            await wait_until(lambda: view(reach, "one-slot")["state"] == "online")
            assert view(reach, "one-slot")["probe"]["last_ok"] is True


@pytest.mark.parametrize("kind", ["false", "raises", "async-false"])
async def test_a_failing_probe_check_answers_not_ok(kind: str, caplog: Any) -> None:
    async with Reach.start(**PROBING) as reach:
        agent = Agent(f"sick-{kind}", reconnect_base=0.02)
        healthy = asyncio.Event()

        @agent.capability("job.run")
        def run() -> str:
            return "ran"

        if kind == "false":
            agent.probe(lambda: healthy.is_set())
        elif kind == "raises":
            def check() -> None:
                if not healthy.is_set():
                    raise ConnectionError("database unreachable")
            agent.probe(check)
        else:
            async def acheck() -> bool:
                return healthy.is_set()
            assert agent.probe(acheck) is acheck

        caplog.set_level(logging.INFO, logger="reach.probes")
        async with agent.connect(reach.url):
            await wait_until(lambda: view(reach, agent.name)["state"] == "suspected")
            assert view(reach, agent.name)["probe"]["last_ok"] is False
            healthy.set()
            await wait_until(lambda: view(reach, agent.name)["state"] == "online")
        reason = "ConnectionError: database unreachable" if kind == "raises" \
            else "the probe check returned False"
        assert any(reason in r.getMessage() for r in caplog.records), caplog.records


async def test_the_intervals_asked_for_are_granted_and_an_async_agent_is_probed_too() -> None:
    async with Reach.start(**PROBING) as reach:
        agent = Agent("asker", heartbeat_interval=0.2, probe_interval=0.06,
                      reconnect_base=0.02)

        @agent.capability("job.run")
        async def run() -> str:
            return "ran"

        assert agent.heartbeat_interval == 0.2 and agent.probe_interval == 0.06
        async with agent.connect(reach.url):
            assert agent.heartbeat_interval == 0.2 and agent.probe_interval == 0.06
            record = reach.registry.by_name["asker"]
            assert record.liveness.interval == 0.2
            # It beats every 0.2 s: on the coordinator's 0.05 s it would be suspected after
            # 0.1 s of each gap; on its own interval it stays online across several beats.
            states, gaps = set(), []
            for _ in range(50):
                await asyncio.sleep(0.01)
                states.add(view(reach, "asker")["state"])
                gaps.append(view(reach, "asker")["since_heartbeat_s"])
            assert states == {"online"} and max(gaps) > 0.1, (states, max(gaps))
            await wait_until(lambda: (view(reach, "asker")["probe"] or {}).get("sent", 0) >= 2)
            probe = view(reach, "asker")["probe"]
            assert probe["interval_s"] == 0.06 and probe["last_ok"] is True


def test_asked_intervals_must_be_sane() -> None:
    for bad in ({"heartbeat_interval": 0}, {"probe_interval": -1},
                {"heartbeat_interval": 1e6}):
        with pytest.raises(ValueError, match="interval"):
            Agent("x", **bad)  # type: ignore[arg-type]
    agent = Agent("y")
    assert agent.asked_intervals == (None, None) and agent.probe_interval is None


async def test_a_probe_that_comes_while_closing_is_not_answered() -> None:
    agent = Agent("closing")
    sent: list[str] = []
    agent._post_text = sent.append  # type: ignore[method-assign]
    agent._closing = True
    agent._on_frame(p.dump(p.Probe(id=3)))
    await asyncio.sleep(0)
    assert not agent._probing and sent == []
