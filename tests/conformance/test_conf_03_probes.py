"""docs/protocol.md §3 "Probes" and "Your own intervals", §5 ``probe``/``probe_result``: only
agents that say ``probes: true`` are probed; an answer within ``probe_slow`` keeps the agent
online, two slow ones suspect it whatever its beats say, a fast one brings it back; a
``probe_result`` nobody awaits is a ``protocol_error`` and the session goes on with nothing
lost; the intervals an agent asks for are bounded and granted in ``welcome``."""

from __future__ import annotations

import asyncio
from typing import Any

from rawpeer import agent, answer, caller, submit, wait_state

from reach import Reach

ECHO = {"name": "conf.echo", "idempotent": True, "latency_ms": 200}
BEAT = 0.1
PROBING: dict[str, Any] = {"heartbeat_interval": BEAT, "probe_interval": 0.05,
                           "probe_slow": 0.03, "offline_after": 50}


def view(reach: Reach, name: str) -> dict[str, Any]:
    return next(a for a in reach.agents() if a["name"] == name)


async def test_an_agent_that_does_not_say_probes_is_never_probed() -> None:
    """§10: v1 agents that know nothing of probes keep working unprobed."""
    async with Reach.start(**PROBING) as reach:
        peer = await agent(reach.url, "old", [ECHO])
        assert "probe_interval" not in peer.welcome
        await peer.silent(0.2)  # four probe intervals: no probe frame, nothing else
        assert view(reach, "old")["state"] == "online" and view(reach, "old")["probe"] is None
        await peer.send({"v": 1, "type": "probe_result", "id": 1})  # nothing was sent to it
        error = await peer.expect("error")
        assert error["id"] == 1 and error["error"]["code"] == "protocol_error"
        assert view(reach, "old")["state"] == "online"
        await peer.close()


async def test_probes_answered_fast_keep_it_unanswered_suspect_it_a_fast_one_restores() -> None:
    async with Reach.start(**PROBING) as reach:
        peer = await agent(reach.url, "probed", [ECHO], probes=True, probe_interval=0.05)
        assert peer.welcome["probe_interval"] == 0.05
        for _ in range(3):  # answered at once: online
            probe = await peer.expect("probe")
            assert set(probe) == {"v", "type", "id"} and isinstance(probe["id"], int)
            await peer.send({"v": 1, "type": "probe_result", "id": probe["id"]})
        assert view(reach, "probed")["state"] == "online"
        assert view(reach, "probed")["probe"]["last_ok"] is True
        # Wedged: probes go unanswered while the heartbeats go on.
        unanswered = [await peer.expect("probe"), await peer.expect("probe")]
        await wait_state(reach, "probed", "suspected")
        assert view(reach, "probed")["suspected_by"] == "probe"
        await asyncio.sleep(3 * BEAT / 2)  # beats came meanwhile: still suspected
        assert view(reach, "probed")["state"] == "suspected"
        assert view(reach, "probed")["since_heartbeat_s"] < BEAT
        # No third probe while two are unanswered; a late answer frees a place ...
        await peer.send({"v": 1, "type": "probe_result", "id": unanswered[0]["id"]})
        fresh = await peer.expect("probe")
        assert fresh["id"] not in (p["id"] for p in unanswered)
        assert view(reach, "probed")["state"] == "suspected"  # ... but proves nothing
        await peer.send({"v": 1, "type": "probe_result", "id": fresh["id"], "ok": True})
        await wait_state(reach, "probed", "online")
        assert view(reach, "probed")["suspected_by"] is None
        await peer.close()


async def test_a_failed_check_counts_as_a_slow_probe() -> None:
    async with Reach.start(**PROBING) as reach:
        peer = await agent(reach.url, "sick", [ECHO], probes=True)
        for _ in range(2):
            probe = await peer.expect("probe")
            await peer.send({"v": 1, "type": "probe_result", "id": probe["id"], "ok": False,
                             "detail": "database unreachable"})
        await wait_state(reach, "sick", "suspected")
        assert view(reach, "sick")["suspected_by"] == "probe"
        assert view(reach, "sick")["probe"]["last_ok"] is False
        await peer.close()


async def test_unsolicited_and_malformed_probe_results_are_protocol_errors_nothing_lost(
        ) -> None:
    async with Reach.start(**{**PROBING, "probe_interval": 30.0}) as reach:
        worker = await agent(reach.url, "worker", [ECHO], probes=True)
        boss = await caller(reach.url, "boss")
        await boss.send(submit(1, "conf.echo", {"x": 1}, timeout=5))
        invoke = await worker.expect("invoke")
        await worker.send({"v": 1, "type": "probe_result", "id": 12345})  # never sent
        error = await worker.expect("error")
        assert error["id"] == 12345 and error["error"]["code"] == "protocol_error"
        assert error["error"]["details"] == {"type": "probe_result", "probe": 12345}
        for bad in ({"v": 1, "type": "probe_result"},  # no id
                    {"v": 1, "type": "probe_result", "id": "x"},
                    {"v": 1, "type": "probe_result", "id": 1, "ok": "maybe"},
                    {"v": 1, "type": "probe_result", "id": 1, "detail": "x" * 2001}):
            await worker.send(bad)
            error = await worker.expect("error")
            assert error["error"]["code"] == "protocol_error", (bad, error)
        await answer(worker, invoke, {"echo": 1})  # the attempt in flight was never touched
        assert (await boss.outcome(1))["result"] == {"echo": 1}
        assert view(reach, "worker")["state"] == "online"
        await worker.close()
        await boss.close()


async def test_the_intervals_an_agent_asks_for_are_bounded_and_granted_in_welcome() -> None:
    """§3 "Your own intervals": heartbeat within ¼…6× the coordinator's, probes within
    ⅙…4×; the liveness clock of that agent runs on its own interval."""
    async with Reach.start(**PROBING) as reach:
        low = await agent(reach.url, "low", [ECHO], heartbeat_interval=0.001, probes=True,
                          probe_interval=0.0001)
        assert low.welcome["heartbeat_interval"] == BEAT / 4
        assert abs(low.welcome["probe_interval"] - 0.05 / 6) < 1e-12
        high = await agent(reach.url, "high", [ECHO], heartbeat_interval=1000, probes=True,
                           probe_interval=1000)
        assert high.welcome["heartbeat_interval"] == BEAT * 6
        assert high.welcome["probe_interval"] == 0.05 * 4
        loop = asyncio.get_running_loop()
        slow = await agent(reach.url, "slow-beat", [ECHO], beat=False,
                           heartbeat_interval=0.3)
        registered = loop.time()
        assert slow.welcome["heartbeat_interval"] == 0.3
        assert "probe_interval" not in slow.welcome  # it did not say probes: true
        await asyncio.sleep(2.5 * BEAT)  # past the coordinator's 2 × 0.1 s, within 2 × 0.3
        assert view(reach, "slow-beat")["state"] == "online"
        assert view(reach, "slow-beat")["heartbeat_interval_s"] == 0.3
        await wait_state(reach, "slow-beat", "suspected")
        assert loop.time() - registered >= 0.6 - 0.01
        for peer in (low, high, slow):
            await peer.close()


async def test_the_probe_frames_and_fields_are_in_the_frame_reference() -> None:
    """§5 lists every field the probe frames carry, and the new register/welcome fields."""
    from docpage import check, documented_frames

    frames = documented_frames()
    assert frames["probe"] == ({"id"}, {"id"})
    assert frames["probe_result"] == ({"id", "ok", "detail"}, {"id"})
    assert {"probes", "heartbeat_interval", "probe_interval"} <= frames["register"][0]
    async with Reach.start(**PROBING) as reach:
        peer = await agent(reach.url, "documented", [ECHO], probes=True)
        check(peer.welcome, frames)
        check(await peer.expect("probe"), frames)
        await peer.close()
