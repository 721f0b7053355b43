"""The holder's feed, without sockets: which rows a peer is sent, in batches, and how they
are framed under the size limit."""

from __future__ import annotations

import json

from reach.cluster.feed import Feed, frames
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.wire.peer import parse_at_caller
from reach.wire.protocol import CapabilitySpec


def registry_of(count: int) -> Registry:
    registry = Registry(LivenessPolicy(10.0))
    for i in range(count):
        registry.register(agent_id=f"ag-{i}", name=f"agent-{i}", version="1",
                          max_concurrency=4, specs=[CapabilitySpec(name="x.run")], link=None,
                          now=100.0)
    return registry


def test_a_snapshot_is_built_a_batch_at_a_time_and_changes_follow() -> None:
    registry = registry_of(1200)
    feed = Feed(registry)
    sub = feed.subscribe()
    batches = []
    while sub.dirty:
        batches.append(sub.rows(101.0, most=500))
    assert [len(b) for b in batches] == [500, 500, 200]
    rows = [r for b in batches for r in b]
    assert len({r["agent_id"] for r in rows}) == 1200
    assert all(r["capabilities"][0]["name"] == "x.run" for r in rows)
    # Nothing moved: a scan marks nothing. A beat and a drain are found by the scan.
    sub.scan()
    assert not sub.dirty
    record = registry.by_id["ag-7"]
    registry.heartbeat(record, 102.0, inflight=1, queue_depth=0, load=0.25)
    registry.deregister(registry.by_id["ag-9"], 102.0)  # (a liveness change: marked at once)
    assert sub.dirty == {"ag-9"}
    sub.scan()
    changed = {r["agent_id"]: r for r in sub.rows(103.0)}
    assert set(changed) == {"ag-7", "ag-9"}
    assert "capabilities" not in changed["ag-7"] and changed["ag-7"]["beat_age"] == 1.0
    assert changed["ag-9"]["draining"] is True
    feed.unsubscribe(sub)
    registry.deregister(registry.by_id["ag-1"], 104.0)
    assert not sub.dirty


def test_peers_never_hear_of_agents_mirrored_from_other_peers() -> None:
    registry = registry_of(2)
    registry.register(agent_id="ag-far", name="far", version="1", max_concurrency=1,
                      specs=[CapabilitySpec(name="x.run")], link=None, now=100.0,
                      kind="peer", node="C")
    sub = Feed(registry).subscribe()
    assert {r["agent_id"] for r in sub.rows(100.0)} == {"ag-0", "ag-1"}


def test_frames_stay_under_the_limit_and_the_last_one_says_synced() -> None:
    rows = [{"agent_id": f"ag-{i}", "name": f"n{i}", "pad": "x" * 200} for i in range(50)]
    texts = list(frames(rows, 2048, synced=True))
    assert len(texts) > 5 and all(len(t) <= 2048 for t in texts)
    decoded = [json.loads(t) for t in texts]
    assert [d.get("synced", False) for d in decoded] == [False] * (len(texts) - 1) + [True]
    assert sum(len(d["rows"]) for d in decoded) == 50
    assert parse_at_caller(texts[0]).rows[0].agent_id == "ag-0"
    assert list(frames([], 2048)) == [] and len(list(frames([], 2048, synced=True))) == 1
