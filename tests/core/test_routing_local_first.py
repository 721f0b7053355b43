"""``Router.pick`` in a cluster (issue 29 item 5): among agents a scoring strategy finds
equally good, the one connected to this node (``node`` None) wins over another node's, whose
attempt would ride a peer link; a clearly better agent elsewhere still wins. (The same with
real peer links: tests/cluster/test_local_first.py.)"""

from __future__ import annotations

from collections import Counter

from reach.core.agents import AgentRecord, Capability
from reach.core.liveness import Liveness
from reach.core.routing import Router
from reach.core.schemas import compile_schema
from reach.wire.protocol import CapabilitySpec

CAP = "x.run"
NOW = 100.0


def record(agent_id: str, node: str | None, inflight: int = 0) -> AgentRecord:
    spec = CapabilitySpec(name=CAP, weight=50.0, latency_ms=100.0)
    rec = AgentRecord(agent_id=agent_id, name=agent_id, version="1", max_concurrency=4,
                      capabilities={CAP: Capability(CAP, spec, compile_schema(spec.params))},
                      node=node)
    rec.state, rec.inflight = Liveness.ONLINE, inflight
    return rec


def test_each_scoring_strategy_breaks_a_tie_toward_the_local_agent() -> None:
    """The pure rule under the cluster tests (``Router.pick``): for the strategies that
    score, equal agents put the local one first; a better one elsewhere still wins."""
    for strategy in ("weighted", "least_load", "lowest_latency"):
        router = Router(strategy=strategy)
        for far_first in (True, False):
            far, near = record("far", "B"), record("near", None)
            agents = {r.agent_id: r for r in ((far, near) if far_first else (near, far))}
            picks = Counter(router.pick(CAP, {}, "c", agents, NOW).name for _ in range(50))
            assert picks == {"near": 50}, (strategy, picks)
    for strategy in ("weighted", "least_load"):  # the local agent busier: the other wins
        agents = {"near": record("near", None, inflight=2), "far": record("far", "B")}
        assert Router(strategy=strategy).pick(CAP, {}, "c", agents, NOW).name == "far"
    agents = {"near": record("near", None), "far": record("far", "B")}  # observed faster
    assert Router(strategy="lowest_latency").pick(
        CAP, {}, "c", agents, NOW, latency={"near": 0.5, "far": 0.1}).name == "far"


def test_with_no_local_candidate_the_remote_ones_still_share_the_work() -> None:
    agents = {n: record(n, n.upper()) for n in ("b", "c")}
    picks = Counter(Router().pick(CAP, {}, "c", agents, NOW).name for _ in range(60))
    assert set(picks) == {"b", "c"}, picks  # (a first-in-list rule would send all to one)
