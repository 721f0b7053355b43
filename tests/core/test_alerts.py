"""Alert rules' state machines (reach.core.alerts): one page per episode, hysteresis, holds.

Plain calls with explicit times, no loop and no clock; hypothesis for the flapping values an
operator must not be paged for every evaluation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core import alerts as al
from reach.core.alerts import FIRING, RESOLVED, Alert, Evaluator, Reading, Rule, Track


def rule(**kw: object) -> Rule:
    base: dict[str, object] = {"name": "r", "kind": al.P95_LATENCY, "threshold": 100.0}
    base.update(kw)
    return Rule(**base)  # type: ignore[arg-type]


def reading(value: float, threshold: float = 100.0, since: float | None = None,
            capability: str | None = "x.y", agent: str | None = None) -> Reading:
    return Reading(capability, agent, value, threshold, since)


def run(track: Track, steps: list[tuple[float, float | None]]) -> list[tuple[float, str]]:
    out = []
    for at, value in steps:
        moved = track.step(at, None if value is None else reading(value, track.rule.threshold
                                                                  or 100.0))
        if moved:
            out.append((at, moved))
    return out


# ---------------------------------------------------------------- one track

def test_a_bad_value_fires_once_and_a_good_one_resolves_once() -> None:
    t = Track(rule(), "x.y", None)
    assert run(t, [(0, 150), (1, 200), (2, 150), (3, 50), (4, 40)]) == [(0, FIRING), (3, RESOLVED)]
    assert t.phase is al.Phase.OK


def test_the_threshold_itself_is_not_bad_and_just_past_it_is() -> None:
    t = Track(rule(), "x.y", None)
    assert t.step(0, reading(100.0)) is None
    assert t.step(1, reading(100.001)) == FIRING


def test_hold_needs_the_bad_value_for_that_long_without_a_break() -> None:
    t = Track(rule(hold=1.0), "x.y", None)
    assert run(t, [(0, 150), (0.5, 150), (0.9, 50), (1.0, 150), (1.9, 150), (2.0, 150)]) == [
        (2.0, FIRING)]
    assert t.bad_since == 1.0 and t.fired_at == 2.0


def test_clear_for_needs_the_good_value_that_long_and_a_relapse_is_no_new_page() -> None:
    t = Track(rule(clear_for=1.0), "x.y", None)
    assert run(t, [(0, 150), (1, 50), (1.5, 150), (2, 50), (2.9, 50), (3.0, 50)]) == [
        (0, FIRING), (3.0, RESOLVED)]


def test_hysteresis_a_value_between_the_bands_neither_pages_nor_resolves() -> None:
    t = Track(rule(hysteresis=0.1), "x.y", None)
    assert run(t, [(0, 95), (1, 101), (2, 95), (3, 99), (4, 90.5), (5, 90.0)]) == [
        (1, FIRING), (5, RESOLVED)]


def test_a_below_rule_is_bad_under_the_threshold_and_good_at_it() -> None:
    t = Track(rule(kind=al.NO_AGENT, threshold=2.0, hysteresis=0.5), None, None)
    assert not t.rule.above
    assert t.step(0, reading(2, 2)) is None
    assert t.step(1, reading(1.5, 2)) == FIRING
    assert t.step(2, reading(2, 2)) is None  # not yet good: 2 × (1 + 0.5) agents
    assert t.step(3, reading(2.99, 2)) is None
    assert t.step(4, reading(3, 2)) == RESOLVED


def test_a_known_start_counts_towards_the_hold_but_never_from_the_future() -> None:
    t = Track(rule(hold=10.0), "x.y", None)
    assert t.step(100, reading(150, since=85)) == FIRING
    assert t.bad_since == 85
    late = Track(rule(hold=10.0), "x.y", None)
    assert late.step(100, reading(150, since=130)) is None
    assert late.bad_since == 100


def test_an_unobserved_subject_counts_as_good() -> None:
    t = Track(rule(clear_for=1.0), "x.y", None)
    assert t.step(0, reading(150)) == FIRING
    assert t.step(1, None) is None and t.phase is al.Phase.CLEARING
    assert t.step(2, None) == RESOLVED
    pending = Track(rule(hold=5.0), "x.y", None)
    pending.step(0, reading(150))
    assert pending.phase is al.Phase.PENDING
    assert pending.step(1, None) is None and pending.phase is al.Phase.OK


def test_the_alert_of_a_track_carries_its_last_reading() -> None:
    t = Track(rule(name="slow"), "x.y", None)
    t.step(10, reading(150, 120))
    t.step(11, reading(175, 120))
    a = t.alert()
    assert (a.rule, a.kind, a.capability, a.agent) == ("slow", al.P95_LATENCY, "x.y", None)
    assert (a.value, a.threshold, a.since, a.fired_at) == (175, 120, 10, 10)
    assert t.alerting


# ---------------------------------------------------------------- alerts as read

def test_alert_views_and_summaries() -> None:
    a = Alert("b", al.BREAKER_OPEN, None, "ledger-writer", 61.23456, 30.00049, 1000.0, 1030.0)
    assert a.id == "b/*/ledger-writer"
    assert a.to_dict(1061.4) == {
        "id": "b/*/ledger-writer", "rule": "b", "kind": "breaker_open", "state": "firing",
        "capability": None, "agent": "ledger-writer", "value": 61.235, "threshold": 30.0,
        "unit": "s", "since": 1000.0, "fired_at": 1030.0, "resolved_at": None,
        "summary": "breaker open 61 s on ledger-writer"}
    assert Alert("n", al.NO_AGENT, "ledger.write", None, 0, 1, 5.0, 6.0).summary(17.0) == (
        "no agent for ledger.write for 12 s")
    assert Alert("n", al.NO_AGENT, "a.b", None, 0, 1, 5.0, 6.0).id == "n/a.b/*"
    assert al.summary(al.P95_LATENCY, "x.y", None, 812.4, 200.0, 3) == "p95 812 ms > 200 ms on x.y"
    assert al.summary(al.DEAD_LETTERS, "*", None, 7, 5, 0) == (
        "7 new dead letters (over 5) on every capability")
    assert al.summary(al.DEAD_LETTERS, "orders.*", None, 7, 5, 0).endswith("on orders.*")
    assert {k: al.UNITS[k] for k in al.KINDS} == {
        "dead_letters": "letters", "breaker_open": "s", "p95_latency": "ms",
        "no_agent": "agents", "backlog_age": "s", "undelivered": "notifications"}


def test_rule_filters_match_globs_and_empty_matches_all() -> None:
    r = rule(capabilities=("ledger.*", "x.y"), agents=("w-?",))
    assert r.capability_matches("ledger.write") and r.capability_matches("x.y")
    assert not r.capability_matches("x.yz") and not r.capability_matches("Ledger.write")
    assert r.agent_matches("w-1") and not r.agent_matches("w-12")
    assert rule().capability_matches("anything") and rule().agent_matches("anyone")


# ---------------------------------------------------------------- the evaluator

def test_evaluator_reports_transitions_with_targets_and_times() -> None:
    r = rule(notify=("oncall",))
    ev = Evaluator((r,))
    [t] = ev.evaluate(5.0, {"r": [reading(150)]})
    assert (t.at, t.notify, t.alert.state, t.alert.resolved_at) == (5.0, ("oncall",), FIRING,
                                                                    None)
    assert ev.evaluate(6.0, {"r": [reading(150)]}) == []
    [t] = ev.evaluate(7.0, {"r": [reading(10)]})
    assert (t.alert.state, t.alert.resolved_at, t.alert.fired_at, t.alert.value) == (
        RESOLVED, 7.0, 5.0, 10)


def test_a_rule_left_out_of_the_readings_is_not_judged() -> None:
    ev = Evaluator((rule(),))
    ev.evaluate(0, {"r": [reading(150)]})
    assert ev.evaluate(1, {}) == []
    assert len(ev.active()) == 1
    two = Evaluator((rule(name="first"), rule(name="second")))
    [t] = two.evaluate(0, {"second": [reading(150)]})  # the rules after one left out, too
    assert t.alert.rule == "second"
    assert (FIRING, RESOLVED) == ("firing", "resolved")


def test_unobserved_subjects_resolve_and_are_forgotten() -> None:
    ev = Evaluator((rule(), rule(name="other")))
    ev.evaluate(0, {"r": [reading(150, capability="a"), reading(150, capability="b")],
                    "other": [reading(150, capability="a")]})
    assert len(ev.tracks) == 3
    moved = ev.evaluate(1, {"r": [reading(150, capability="a")], "other": [
        reading(150, capability="a")]})
    assert [(t.alert.capability, t.alert.state) for t in moved] == [("b", RESOLVED)]
    assert set(ev.tracks) == {("r", "a", None), ("other", "a", None)}
    quiet = ev.evaluate(2, {"r": [reading(50, capability="z")]})
    assert [(t.alert.rule, t.alert.capability) for t in quiet] == [("r", "a")]
    assert ("r", "z", None) in ev.tracks  # observed: kept, even when ok


def test_a_clearing_track_unobserved_is_kept_until_it_resolves() -> None:
    ev = Evaluator((rule(clear_for=5.0),))
    ev.evaluate(0, {"r": [reading(150)]})
    assert ev.evaluate(1, {"r": []}) == []
    assert len(ev.tracks) == 1 and len(ev.active()) == 1
    [t] = ev.evaluate(6, {"r": []})
    assert t.alert.state == RESOLVED and ev.tracks == {}


def test_active_alerts_are_oldest_first_then_by_id() -> None:
    ev = Evaluator((rule(), rule(name="q")))
    ev.evaluate(1, {"r": [reading(150, capability="b")], "q": []})
    ev.evaluate(2, {"r": [reading(150, capability="b"), reading(150, capability="a")],
                    "q": [reading(150, capability="a")]})
    assert [a.id for a in ev.active()] == ["r/b/*", "q/a/*", "r/a/*"]


# ---------------------------------------------------------------- readings

def test_open_spells_keep_the_first_opening_until_the_breaker_closes() -> None:
    spells = al.OpenSpells()
    assert spells.update({"a": (False, 10.0), "b": (True, 3.0)}) == {"a": 10.0}
    assert spells.update({"a": (False, 16.0), "b": (False, 20.0)}) == {"a": 10.0, "b": 20.0}
    assert spells.update({"a": (True, 16.0)}) == {}
    out = spells.update({"a": (False, 30.0)})
    out["x"] = 1.0
    assert spells.since == {"a": 30.0}


def test_breaker_readings_filter_agents_and_their_capabilities() -> None:
    r = rule(kind=al.BREAKER_OPEN, threshold=30.0, agents=("led*",), capabilities=("l.*",))
    # (an agent each filter skips comes before one that passes: skipping is not stopping)
    got = al.breaker_readings(r, {"other": 10.0, "led2": 12.0, "ledger": 10.0},
                              {"ledger": ["l.write"], "led2": ["m.read"],
                               "other": ["l.write"]}, 50.0)
    assert got == [Reading(None, "ledger", 40.0, 30.0, 10.0)]
    anyone = rule(kind=al.BREAKER_OPEN, threshold=5)
    assert [x.agent for x in al.breaker_readings(anyone, {"a": 1.0}, {}, 2.0)] == ["a"]


def test_deaths_count_within_each_rules_window_and_filters() -> None:
    every = rule(name="every", kind=al.DEAD_LETTERS, threshold=2)  # window 60 s
    caps = rule(name="caps", kind=al.DEAD_LETTERS, threshold=0, window=10.0,
                capabilities=("a.*", "z.z"))
    by_agent = rule(name="w2", kind=al.DEAD_LETTERS, threshold=0, agents=("w2",))
    # (the filtering rules come first: a letter one rule skips still reaches the next)
    deaths = al.Deaths([caps, by_agent, rule(), every])
    assert [r.name for r in deaths.rules] == ["caps", "w2", "every"]  # not the p95 rule
    assert deaths.window == 60.0
    for capability, agents, died in [("c.d", ("w2",), 30.0), ("a.b", ("w1",), 39.5),
                                     ("a.b", (), 40.0), ("c.d", iter(["w1", "w2"]), 95.0)]:
        deaths.add(capability, agents, died)
    assert list(deaths.times["w2"]) == [30.0, 95.0]  # the letters w2 made an attempt at
    assert list(deaths.times["caps"]) == [39.5, 40.0]
    assert deaths.readings(every, 99.5) == [Reading("*", None, 3.0, 2.0)]  # 39.5, 40, 95
    assert deaths.readings(caps, 100.0) == [Reading("a.*,z.z", None, 0.0, 0.0)]
    assert deaths.readings(by_agent, 100.0)[0].value == 1.0  # 30.0 is past its window
    assert deaths.readings(every, 100.0)[0].value == 2.0
    assert deaths.readings(every, 100.0)[0].value == 2.0  # reading twice changes nothing
    assert deaths.readings(every, 100.0001)[0].value == 1.0  # 40.0 is past now
    assert al.Deaths([rule()]).window == 0.0


def test_deaths_at_the_window_edge_count_until_past_it() -> None:
    r = rule(kind=al.DEAD_LETTERS, threshold=0)
    deaths = al.Deaths([r])
    deaths.add("x", (), 40.0)
    assert deaths.readings(r, 100.0)[0].value == 1.0
    assert deaths.readings(r, 100.5)[0].value == 0.0


def test_latency_readings_use_the_rule_threshold_or_the_declared_latency() -> None:
    declared = rule(threshold=None, capabilities=("a.*",))
    p95 = {"a.undeclared": 900.0, "a.none": None, "b.x": 999.0, "a.x": 150.0}
    got = al.latency_readings(declared, p95, {"a.x": 120, "a.none": 10, "b.x": 1})
    assert got == [Reading("a.x", None, 150.0, 120.0)]
    explicit = rule(threshold=50.0)
    assert [(x.capability, x.threshold) for x in al.latency_readings(explicit, p95, {})] == [
        ("a.undeclared", 50.0), ("b.x", 50.0), ("a.x", 50.0)]


def test_agent_readings_watch_known_and_spelled_out_capabilities() -> None:
    r = rule(kind=al.NO_AGENT, threshold=None, capabilities=("l.*", "never.seen", "q?.x",
                                                              "[ab].c"))
    got = al.agent_readings(r, {"l.write": 0, "l.read": 2, "m.x": 0})
    assert got == [Reading("l.read", None, 2.0, 1.0), Reading("l.write", None, 0.0, 1.0),
                   Reading("never.seen", None, 0.0, 1.0)]
    two = rule(kind=al.NO_AGENT, threshold=2)
    assert [x.threshold for x in al.agent_readings(two, {"m.x": 5})] == [2.0]


# ---------------------------------------------------------------- properties

values = st.one_of(st.none(), st.floats(0, 200))
steps = st.lists(st.tuples(st.floats(0.0, 3.0), values), max_size=60)


@settings(max_examples=80, deadline=None)
@given(steps, st.floats(0, 2), st.floats(0, 2), st.floats(0, 0.5))
def test_pages_alternate_firing_then_resolved(seq: list[tuple[float, float | None]],
                                              hold: float, clear: float, hys: float) -> None:
    t = Track(rule(hold=hold, clear_for=clear, hysteresis=hys), "x.y", None)
    now, moved = 0.0, []
    for dt, value in seq:
        now += dt
        m = t.step(now, None if value is None else reading(value))
        if m:
            moved.append(m)
    assert moved == [FIRING, RESOLVED] * (len(moved) // 2) + [FIRING] * (len(moved) % 2)
    assert t.alerting == (len(moved) % 2 == 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 0.2), min_size=1, max_size=80), st.floats(0.05, 0.5))
def test_a_value_flapping_across_the_threshold_in_the_band_pages_once(
        gaps: list[float], hys: float) -> None:
    """Once firing, a value flapping between just under and over the threshold (inside the
    hysteresis band) is one page, never a resolved and a new firing."""
    t = Track(rule(hysteresis=hys), "x.y", None)
    assert t.step(0.0, reading(150)) == FIRING
    now = 0.0
    for i, gap in enumerate(gaps):
        now += gap
        assert t.step(now, reading(100.5 if i % 2 else 100 * (1 - hys / 2))) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 0.4), min_size=1, max_size=80))
def test_a_value_bad_for_less_than_the_hold_at_a_time_never_pages(gaps: list[float]) -> None:
    t = Track(rule(hold=1.0), "x.y", None)
    now = 0.0
    for gap in gaps:
        assert t.step(now, reading(150)) is None
        now += min(gap, 0.45)
        assert t.step(now, reading(50)) is None
        now += gap


def test_backlog_age_reads_each_matching_capability_s_oldest_waiting_task() -> None:
    rule = Rule("stuck", al.BACKLOG_AGE, threshold=60.0, capabilities=("report.*",))
    readings = al.backlog_readings(rule, {"report.build": 90.0, "report.mail": 10.0,
                                          "price.get": 500.0}, now=1000.0)
    assert readings == [Reading("report.build", None, 90.0, 60.0, since=970.0),
                        Reading("report.mail", None, 10.0, 60.0, since=None)]
    evaluator = Evaluator((rule,))
    [fired] = evaluator.evaluate(1000.0, {"stuck": readings})
    assert fired.alert.state == FIRING and fired.alert.since == 970.0
    assert fired.alert.summary(1000.0) == \
        "a task of report.build waited 90 s in the backlog (over 60 s)"
    assert fired.alert.to_dict(1000.0)["unit"] == "s"
    # the backlog drained: its capability is no longer read, which counts as good
    [resolved] = evaluator.evaluate(1001.0, {"stuck": al.backlog_readings(rule, {}, 1001.0)})
    assert resolved.alert.state == RESOLVED
