"""``metrics.combine``: a cluster's counters from its nodes' (pure)."""

from __future__ import annotations

from reach.core.metrics import COUNTERS, combine


def series(**counts: int) -> dict[str, object]:
    return {**dict.fromkeys(COUNTERS, 0), "p50_ms": 1.0, **counts}


def test_counters_add_up_in_total_and_per_capability_and_each_node_keeps_its_own() -> None:
    nodes = {
        "b": {"totals": series(calls=3, succeeded=2, faults=1, inflight=1),
              "capabilities": {"x.do": series(calls=3, succeeded=2, faults=1)}},
        "a": {"totals": series(calls=5, succeeded=5, retries=2, fallbacks=1),
              "capabilities": {"x.do": series(calls=1, succeeded=1),
                               "y.do": series(calls=4, succeeded=4, rejections=3)}},
    }
    out = combine(nodes)
    assert out["totals"] == {**dict.fromkeys(COUNTERS, 0), "calls": 8, "succeeded": 7,
                             "faults": 1, "retries": 2, "fallbacks": 1, "inflight": 1}
    assert list(out["capabilities"]) == ["x.do", "y.do"]
    assert out["capabilities"]["x.do"]["calls"] == 4
    assert out["capabilities"]["x.do"]["faults"] == 1
    assert out["capabilities"]["y.do"]["rejections"] == 3
    assert list(out["nodes"]) == ["a", "b"] and out["nodes"]["b"]["calls"] == 3
    assert "p50_ms" not in out["totals"]  # percentiles do not add up


def test_missing_parts_and_nulls_count_as_zero() -> None:
    out = combine({"a": {}, "b": {"totals": {"calls": None, "succeeded": 2}}})
    assert out["totals"]["calls"] == 0 and out["totals"]["succeeded"] == 2
    assert out["capabilities"] == {} and out["nodes"] == {"a": {}, "b": {"calls": None,
                                                                        "succeeded": 2}}
