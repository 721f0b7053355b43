"""The dashboard's state merge, fed frames as the admin feed documents them (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import sample
from dashboard.model import TRACE_LIMIT, Change, Model


def agent(name: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "agent_id": f"ag-{n}", "state": "online", **extra}


def trace(n: int, started: float, **extra: Any) -> dict[str, Any]:
    return {"trace_id": f"t{n}", "root": "x.run", "started_at": started, "state": "running",
            **extra}


def letter(n: int, dead_since: float) -> dict[str, Any]:
    return {"task_id": f"d{n}", "capability": "x.fail", "dead_since": dead_since}


def snapshot(**parts: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {"v": 1, "type": "snapshot", "at": 100.0, "coordinator": {},
                             "agents": [], "traces": [], "dead_letters": [],
                             "metrics": {"totals": {"calls": 0}}}
    frame.update(parts)
    return frame


def delta(at: float = 101.0, **parts: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {"v": 1, "type": "delta", "at": at, "agents": [], "traces": [],
                             "dead_letters": [], "resolved": [], "metrics": {"totals": {}},
                             "dropped": 0}
    frame.update(parts)
    return frame


def test_snapshot_replaces_everything() -> None:
    model = Model()
    model.apply(snapshot(agents=[agent("b", 2), agent("a", 1)],
                         traces=[trace(1, 50.0), trace(2, 60.0)],
                         dead_letters=[letter(2, 30.0), letter(1, 20.0)]))
    assert model.at == 100.0
    assert [a["name"] for a in model.agents_by_name()] == ["a", "b"]
    assert [t["trace_id"] for t in model.traces_newest_first()] == ["t2", "t1"]
    assert [d["task_id"] for d in model.letters_oldest_first()] == ["d1", "d2"]
    change = model.apply(snapshot(agents=[agent("c", 3)], at=200.0))
    assert change.snapshot and change.agents and change.traces and change.dead_letters
    assert list(model.agents) == ["ag-3"] and model.traces == {} and model.dead_letters == {}


def test_delta_replaces_by_id_and_inserts_new_ones() -> None:
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1, inflight=0)], traces=[trace(1, 50.0)]))
    change = model.apply(delta(agents=[agent("a", 1, inflight=3), agent("b", 2)],
                               traces=[trace(1, 50.0, state="failed"), trace(2, 99.0)]))
    assert change.agents and change.traces
    assert model.agents["ag-1"]["inflight"] == 3
    assert sorted(model.agents) == ["ag-1", "ag-2"]
    assert model.traces["t1"]["state"] == "failed"
    assert [t["trace_id"] for t in model.traces_newest_first()] == ["t2", "t1"]


def test_delta_adds_and_resolves_dead_letters() -> None:
    model = Model()
    model.apply(snapshot(dead_letters=[letter(1, 10.0), letter(2, 11.0)]))
    change = model.apply(delta(dead_letters=[letter(3, 12.0)], resolved=["d1", "unknown"]))
    assert change.dead_letters
    assert [d["task_id"] for d in model.letters_oldest_first()] == ["d2", "d3"]


def test_metrics_replace_and_dropped_is_reported() -> None:
    model = Model()
    model.apply(snapshot(metrics={"totals": {"calls": 1, "faults": 0}}))
    change = model.apply(delta(metrics={"totals": {"calls": 5}}, dropped=3))
    assert model.totals() == {"calls": 5}
    assert change.metrics and change.dropped == 3


def test_an_empty_delta_still_moves_the_clock_so_ages_refresh() -> None:
    model = Model()
    model.apply(snapshot(at=100.0))
    change = model.apply(delta(at=101.0))
    assert model.at == 101.0
    assert change.agents and change.traces and change.dead_letters
    same = model.apply(delta(at=101.0))
    assert not (same.agents or same.traces or same.dead_letters)


def test_a_delta_without_at_keeps_the_clock() -> None:
    # The app merges a command's returned agent view this way, between deltas.
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1)], at=100.0))
    change = model.apply({"type": "delta", "agents": [agent("a", 1, draining=True)]})
    assert model.at == 100.0 and change.agents and not change.traces
    assert model.agents["ag-1"]["draining"] is True


def test_traces_are_capped_to_the_newest() -> None:
    model = Model()
    model.apply(snapshot(traces=[trace(n, float(n)) for n in range(TRACE_LIMIT)]))
    model.apply(delta(traces=[trace(TRACE_LIMIT + 1, 1e6)]))
    assert len(model.traces) == TRACE_LIMIT
    assert "t0" not in model.traces and f"t{TRACE_LIMIT + 1}" in model.traces


def test_other_frames_are_refused() -> None:
    with pytest.raises(ValueError):
        Model().apply({"v": 1, "type": "reply", "id": 1})


def test_the_sample_state_merges() -> None:
    model = Model()
    change = model.apply(sample.snapshot())
    assert change == Change(snapshot=True, agents=True, traces=True, dead_letters=True,
                            metrics=True)
    assert model.at == sample.AT
    assert len(model.agents) == 5 and len(model.dead_letters) == 3
