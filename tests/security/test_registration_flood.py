"""Registration floods: many agents declaring up to 256 capabilities each (the default cap), look-alikes among
them, must register in time linear in the capabilities (the name index, reach/names.py
``NameIndex``), keep the loop responsive, bound the warnings, and leave ``no_route`` answers
as quick and as helpful as on a small registry."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import pytest
import websockets

import reach
from reach.core.liveness import Liveness
from reach.core.names import NameIndex
from reach.core.registry import MAX_WARNINGS
from reach.testing import Cluster, wait_until

DOMAINS = ("inventory", "sales", "billing", "shipping", "catalog", "pricing", "orders",
           "payments", "customers", "reports")
VERBS = ("query", "update", "list", "create", "sync", "export", "check", "count", "report",
         "delete")
AGENTS = 40
PER_AGENT = 256  # the coordinator's default per-registration cap: 10,240 names in all


def flood_names(i: int, count: int, prefix: str = "") -> list[str]:
    """Agent ``i``'s capabilities: ``{domain}{n}.{verb}``, the odd agents spelling their
    neighbour's names verb first (``{verb}.{domain}{n}``): one look-alike per capability."""
    verb = VERBS[(i - i % 2) % len(VERBS)]
    group = "" if i < len(VERBS) else f"g{i // len(VERBS)}"  # past 10 agents: new domains
    out = []
    for j in range(count):
        domain = f"{prefix}{group}{DOMAINS[j % len(DOMAINS)]}{j // len(DOMAINS)}"
        out.append(f"{verb}.{domain}" if i % 2 else f"{domain}.{verb}")
    return out


def register_frame(name: str, caps: list[str]) -> str:
    return json.dumps({"v": 1, "type": "register", "name": name,
                       "capabilities": [{"name": c} for c in caps]})


async def register_all(cluster: Cluster, frames: list[str],
                       sockets: list[Any]) -> tuple[float, list[dict[str, Any]]]:
    """Connect and register one raw agent per frame, one after another; returns the time it
    took and the welcome frames. The sockets stay open (the agents stay registered)."""
    loop = asyncio.get_running_loop()
    welcomes = []
    started = loop.time()
    for frame in frames:
        ws = await websockets.connect(cluster.url, max_size=None)
        sockets.append(ws)
        await ws.send(frame)
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        welcomes.append(welcome)
    return loop.time() - started, welcomes


async def close_all(sockets: list[Any]) -> None:
    await asyncio.gather(*(ws.close() for ws in sockets))


async def noop() -> None:
    return None


async def test_forty_agents_of_256_capabilities_register_in_linear_time(
        cluster: Cluster) -> None:
    # Built before the clock starts: the frames are the attacker's work, not the coordinator's.
    base = [register_frame(f"base-{i}", flood_names(i, PER_AGENT // 10, "b"))
            for i in range(AGENTS)]
    flood = [register_frame(f"flood-{i}", flood_names(i, PER_AGENT)) for i in range(AGENTS)]
    sockets: list[Any] = []
    try:
        baseline, _ = await register_all(cluster, base, sockets)
        took, welcomes = await register_all(cluster, flood, sockets)
    finally:
        await close_all(sockets)
    print(f"\n{AGENTS}x{PER_AGENT // 10} capabilities registered in {baseline * 1000:.1f} ms, "
          f"{AGENTS}x{PER_AGENT} in {took * 1000:.1f} ms ({took / baseline:.1f}x for 10x the "
          f"names)")
    # Linear would be 10x; judging every name against every known one was over 100x (and
    # 10,000 names took 87 s), so 30x leaves room for noise and none for a quadratic step.
    assert took < 30 * baseline
    assert len(cluster.reach.registry.names) == AGENTS * (PER_AGENT + PER_AGENT // 10)
    for i, welcome in enumerate(welcomes):
        assert len(welcome["capabilities"]) == PER_AGENT
        if i % 2 == 0:
            assert welcome["warnings"] == []
            continue
        # Every capability of an odd agent looks like one of its neighbour's: listed up to
        # the cap, counted past it.
        warnings = welcome["warnings"]
        assert len(warnings) == MAX_WARNINGS + 1
        assert all("looks like existing" in w for w in warnings[:-1])
        assert warnings[-1] == f"... and {PER_AGENT - MAX_WARNINGS} more warnings"


async def test_the_loop_stays_responsive_while_a_flood_registers(
        cluster: Cluster, probe: Any) -> None:
    frames = [register_frame(f"flood-{i}", flood_names(i, PER_AGENT)) for i in range(AGENTS)]
    sockets: list[Any] = []
    try:
        await register_all(cluster, frames, sockets)
        # One maximum registration (256 names, look-alike checks, schemas) is one loop step
        # of 35-60 ms on these 2-core machines (measured worst probe call 36-44 ms on main
        # before issue 11, 42-57 ms after; the 50 ms bound failed in ~1 run of 3): a
        # legitimate call may wait behind one such step, not two. Splitting a registration
        # across loop steps would bring this under 50 ms again (docs/security.md).
        await probe.check(limit=0.1)
    finally:
        print(f"\nworst probe call {probe.worst * 1000:.1f} ms over {probe.calls} calls")
        await close_all(sockets)


async def test_no_route_after_a_flood_answers_fast_with_the_right_suggestions(
        cluster: Cluster, probe: Any) -> None:
    await cluster.add_agent("inventory", {"inventory.query": noop, "inventory.update": noop})
    await cluster.add_agent("sales", {"sales.query": noop})
    client = await cluster.client("c")
    sockets: list[Any] = []
    frames = [register_frame(f"flood-{i}", flood_names(i, PER_AGENT)) for i in range(AGENTS)]
    await probe.stop()  # (the flood itself is the test above)
    try:
        await register_all(cluster, frames, sockets)
        record = cluster.reach.registry.by_name["probe-agent"]
        await wait_until(lambda: record.state is Liveness.ONLINE)
        probe.worst, probe.failures[:] = 0.0, []
        probe.start()
        for typo, expected in [("inventry.query", "inventory.query"),
                               ("QueryInventry", "inventory.query"),
                               ("sales.querry", "sales.query"),
                               ("invntory.update", "inventory.update"),
                               ("inventory12.qury", "inventory12.query")]:
            with pytest.raises(reach.NoRoute) as e:
                await client.call(typo)
            assert e.value.suggestions[0] == expected, (typo, e.value.suggestions)
            assert len(e.value.suggestions) == 3
        await probe.check()
    finally:
        await close_all(sockets)


def median_closest(indexes: list[NameIndex], queries: list[str],
                   rounds: int = 30) -> list[float]:
    """The median time of ``closest`` on each index, the indexes taking turns."""
    times: list[list[float]] = [[] for _ in indexes]
    for _ in range(rounds):
        for index, spent in zip(indexes, times, strict=True):
            for query in queries:
                started = time.perf_counter()
                index.closest(query)
                spent.append(time.perf_counter() - started)
    return [statistics.median(spent) for spent in times]


def test_closest_at_ten_thousand_names_costs_what_it_costs_at_a_hundred() -> None:
    queries = ["inventry.query", "sales.querry", "billing7.updte", "qury.orders3",
               "zzz.unknown", "InventoryQuery"]
    names = [n for i in range(AGENTS) for n in flood_names(i, PER_AGENT)]
    big = NameIndex([*names, "inventory.query", "sales.query"])
    small = NameIndex([*names[:98], "inventory.query", "sales.query"])
    at_small, at_big = median_closest([small, big], queries)
    print(f"\nNameIndex.closest median: {at_small * 1e6:.0f} us at {len(small)} names, "
          f"{at_big * 1e6:.0f} us at {len(big)} names")
    # Comparing with every name grows 100x from 100 to 10,000 names; the index reads a
    # bounded shortlist, so the two stay within a small factor.
    assert at_big < 5 * at_small
    assert big.closest("inventry.query")[0] == "inventory.query"


async def test_one_register_of_ten_thousand_capabilities_is_refused_from_its_count(
        cluster: Cluster, probe: Any) -> None:
    """One frame with 10,000 capabilities froze the loop 107 s. Now it is refused for its
    count from a plain decode, before ~90 ms of validating specs that were never accepted."""
    frame = register_frame("greedy", flood_names(0, 10_000))
    async with websockets.connect(cluster.url, max_size=None) as ws:
        await ws.send(frame)
        reply = json.loads(await ws.recv())
        assert reply["error"]["code"] == "invalid_params"
        assert "10000 capabilities, over the limit of 256" in reply["error"]["message"]
        await ws.wait_closed()
        assert ws.close_code == 1008
    assert "greedy" not in cluster.reach.registry.by_name
    await probe.check()
