"""The dashboard's state merge, fed frames as the admin feed documents them (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import sample
from dashboard.model import TRACE_LIMIT, BadFrame, Change, Model
from reach.wire import admin

COORDINATOR = {"url": "ws://127.0.0.1:8765", "version": "0.1.0", "started_at": 0.0,
               "store": "memory"}


def agent(name: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "agent_id": f"ag-{n}", "state": "online", **extra}


def trace(n: int, started: float, **extra: Any) -> dict[str, Any]:
    return {"trace_id": f"t{n}", "root": "x.run", "started_at": started, "state": "running",
            **extra}


def letter(n: int, dead_since: float) -> dict[str, Any]:
    return {"task_id": f"d{n}", "capability": "x.fail", "caller": "planner",
            "dead_since": dead_since}


def snapshot(**parts: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {"v": 1, "type": "snapshot", "at": 100.0, "coordinator": COORDINATOR,
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
    assert [a.name for a in model.agents_by_name()] == ["a", "b"]
    assert [t.trace_id for t in model.traces_newest_first()] == ["t2", "t1"]
    assert [d.task_id for d in model.letters_oldest_first()] == ["d1", "d2"]
    assert model.coordinator is not None and model.coordinator.store == "memory"
    change = model.apply(snapshot(agents=[agent("c", 3)], at=200.0))
    assert change.snapshot and change.agents and change.traces and change.dead_letters
    assert list(model.agents) == ["ag-3"] and model.traces == {} and model.dead_letters == {}


def test_delta_replaces_by_id_and_inserts_new_ones() -> None:
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1, inflight=0)], traces=[trace(1, 50.0)]))
    change = model.apply(delta(agents=[agent("a", 1, inflight=3), agent("b", 2)],
                               traces=[trace(1, 50.0, state="failed"), trace(2, 99.0)]))
    assert change.agents and change.traces
    assert model.agents["ag-1"].inflight == 3
    assert sorted(model.agents) == ["ag-1", "ag-2"]
    assert model.traces["t1"].state == "failed"
    assert [t.trace_id for t in model.traces_newest_first()] == ["t2", "t1"]


def test_delta_adds_and_resolves_dead_letters() -> None:
    model = Model()
    model.apply(snapshot(dead_letters=[letter(1, 10.0), letter(2, 11.0)]))
    change = model.apply(delta(dead_letters=[letter(3, 12.0)], resolved=["d1", "unknown"]))
    assert change.dead_letters
    assert [d.task_id for d in model.letters_oldest_first()] == ["d2", "d3"]


def test_metrics_replace_and_dropped_is_reported() -> None:
    model = Model()
    model.apply(snapshot(metrics={"totals": {"calls": 1, "faults": 0}}))
    change = model.apply(delta(metrics={"totals": {"calls": 5}}, dropped=3))
    assert model.totals() == admin.Series(calls=5)
    assert change.metrics and change.dropped == 3


def test_a_delta_without_metrics_keeps_them() -> None:
    model = Model()
    model.apply(snapshot(metrics={"totals": {"calls": 1}}))
    bare = delta()
    del bare["metrics"]
    change = model.apply(bare)
    assert not change.metrics and model.totals() == admin.Series(calls=1)


def test_totals_are_unknown_until_a_frame_carries_them() -> None:
    model = Model()
    assert model.totals() is None
    model.apply(snapshot(metrics={}))
    assert model.totals() is None


def test_an_empty_delta_still_moves_the_clock_so_ages_refresh() -> None:
    model = Model()
    model.apply(snapshot(at=100.0))
    change = model.apply(delta(at=101.0))
    assert model.at == 101.0
    assert change.agents and change.traces and change.dead_letters
    same = model.apply(delta(at=101.0))
    assert not (same.agents or same.traces or same.dead_letters)


def test_a_delta_built_at_the_feed_time_moves_nothing_else() -> None:
    # The app merges a command's returned agent view this way, between deltas.
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1)], at=100.0))
    view = admin.AgentView.model_validate(agent("a", 1, draining=True))
    change = model.apply(admin.Delta(at=model.at, agents=[view]))
    assert model.at == 100.0 and change.agents and not change.traces and not change.metrics
    assert model.agents["ag-1"].draining is True
    assert model.totals() == admin.Series(calls=0)


def test_traces_are_capped_to_the_newest() -> None:
    model = Model()
    model.apply(snapshot(traces=[trace(n, float(n)) for n in range(TRACE_LIMIT)]))
    model.apply(delta(traces=[trace(TRACE_LIMIT + 1, 1e6)]))
    assert len(model.traces) == TRACE_LIMIT
    assert "t0" not in model.traces and f"t{TRACE_LIMIT + 1}" in model.traces


def test_other_frames_are_refused() -> None:
    with pytest.raises(BadFrame, match="not a snapshot or delta frame: 'reply'"):
        Model().apply({"v": 1, "type": "reply", "id": 1})


@pytest.mark.parametrize(("frame", "where"), [
    (delta(agents=[{"name": "no id", "state": "online"}]), "agents.0.agent_id"),
    ({**delta(), "at": "soon"}, "at"),
    (snapshot(coordinator={}), "coordinator.url"),
    (delta(dead_letters=[{"task_id": "d1", "capability": "x"}]), "dead_letters.0.caller"),
])
def test_a_frame_off_the_contract_is_refused_and_changes_nothing(frame: dict[str, Any],
                                                                 where: str) -> None:
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1)]))
    with pytest.raises(BadFrame, match=f"invalid (snapshot|delta) frame: {where}: "):
        model.apply(frame)
    assert model.frames == 1 and list(model.agents) == ["ag-1"] and model.at == 100.0


def test_the_sample_state_merges() -> None:
    model = Model()
    change = model.apply(sample.snapshot())
    assert change == Change(snapshot=True, agents=True, traces=True, dead_letters=True,
                            metrics=True)
    assert model.at == sample.AT
    assert len(model.agents) == 5 and len(model.dead_letters) == 3


def test_nodes_are_this_coordinator_and_the_peers_holding_agents() -> None:
    model = Model()
    model.apply(snapshot(agents=[agent("a", 1)]))
    assert model.nodes() == set()  # a coordinator without peer links says no node
    model.apply(snapshot(coordinator={**COORDINATOR, "node": "A"},
                         agents=[agent("a", 1, node="A")]))
    assert model.nodes() == {"A"}
    model.apply(delta(agents=[agent("b", 2, node="B", kind="peer"),
                              agent("c", 3, node="C", kind="peer")]))
    assert model.nodes() == {"A", "B", "C"}
