"""reach.core.agents: what a fresh record shows, and its repr (issue 17's mutation run)."""

from __future__ import annotations

from reach.core.agents import AgentRecord, Capability, Declared
from reach.core.schemas import compile_schema
from reach.wire.protocol import CapabilitySpec

CAP = "work.do"


def record() -> AgentRecord:
    spec = CapabilitySpec(name=CAP, params={"type": "object"}, weight=1.0)
    return AgentRecord(agent_id="a1", name="worker", version="2", max_concurrency=3,
                       capabilities={CAP: Capability(CAP, spec, compile_schema(spec.params))})


def test_a_fresh_record_shows_no_load_no_calls_and_a_closed_breaker():
    view = record().view(now=12.5)
    assert view == {
        "name": "worker", "agent_id": "a1", "state": "online", "kind": "websocket",
        "version": "2", "inflight": 0, "max_concurrency": 3, "load": 0.0,
        "queue_depth": 0, "calls": 0, "faults": 0, "capabilities": [CAP],
        "breaker": "closed",
        "breaker_detail": {"state": "closed", "fault_rate": 0.0, "window": 0,
                           "window_size": 10, "next_probe_in_s": None},
        "p95_ms": None, "since_heartbeat_s": 12.5, "last_beat": 0.0,
        "connected": True, "draining": False, "drained_by": None,
        "suspected_by": None, "heartbeat_interval_s": 10.0, "probe": None,
        "warming": False, "warm_share": 1.0, "success_7d": None, "calls_7d": 0,
    }


def test_a_draining_record_says_who_drained_it():
    r = record()
    r.draining, r.drained_by = True, "agent"
    assert (r.view(now=1.0)["draining"], r.view(now=1.0)["drained_by"]) == (True, "agent")
    r.draining = False  # undrained: who once drained it is not news
    assert r.view(now=1.0)["drained_by"] is None


def test_an_open_breaker_shows_when_its_probe_comes():
    r = record()
    for _ in range(5):
        r.breaker.record(False, 10.0)
    detail = r.view(now=11.0, p95_ms=40.0)["breaker_detail"]
    assert detail == {"state": "open", "fault_rate": 1.0, "window": 5, "window_size": 10,
                      "next_probe_in_s": 4.0, "opened_at": 10.0, "probe_after": 15.0,
                      "tripped_rate": 1.0, "tripped_calls": 5, "probe_failed": False}
    assert r.view(now=99.0)["breaker_detail"]["next_probe_in_s"] == 0.0


def test_a_failed_probe_keeps_what_tripped_the_breaker():
    """Issue 14: after a failed probe the window is empty ("0% of last 0"); the view still
    says which rate tripped it, when it opened again, and that the probe failed."""
    r = record()
    for ok in (True, False, False, True, False, False):
        r.breaker.record(ok, 10.0)
    r.breaker.on_dispatch(16.0)  # the half-open probe
    r.breaker.record(False, 16.5)
    detail = r.view(now=17.0)["breaker_detail"]
    assert detail["window"] == 0 and detail["fault_rate"] == 0.0
    assert (detail["tripped_rate"], detail["tripped_calls"]) == (0.6, 5)
    assert detail["opened_at"] == 16.5 and detail["probe_after"] == 21.5
    assert detail["probe_failed"] is True
    r.breaker.reset()
    assert "tripped_rate" not in r.view(now=18.0)["breaker_detail"]


def test_repr_leaves_out_the_routing_groups_and_the_wheel_slot():
    r = record()
    r.groups.append(Declared(CAP).join(r))
    r.due = 5.0
    text = repr(r)
    assert "agent_id='a1'" in text
    assert "groups=" not in text and "due=" not in text


def test_view_rounds_to_the_millisecond_and_shelves_count_their_records():
    r = record()
    r.last_beat = 10.0
    for ok in (False, True, True):
        r.breaker.record(ok, 10.0)
    assert r.view(now=10.0 + 1 / 3)["since_heartbeat_s"] == 0.333
    assert r.view(now=11.0)["breaker_detail"]["fault_rate"] == 0.333
    for _ in range(5):
        r.breaker.record(False, 20.0)
    assert r.view(now=20.0 + 2 / 3)["breaker_detail"]["next_probe_in_s"] == 4.333
    group = Declared(CAP).join(r)
    assert len(group.held) == 1 and len(group.ready) == 0 and r in group.held  # open


def test_the_tripping_rate_is_rounded_to_a_thousandth() -> None:
    r = record()
    r.breaker.threshold = 0.65
    for ok in (False, True, False, True, False, False):  # 3/5 stays closed, 4/6 opens
        r.breaker.record(ok, 10.0)
    detail = r.view(now=10.5)["breaker_detail"]
    assert (detail["tripped_rate"], detail["tripped_calls"]) == (0.667, 6)
