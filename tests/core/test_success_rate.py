"""The 7-day success rate (reach.core.stats.DayRate, ``reliability``) and its weight in the
weighted routing score (issue 13, item 8): a reliably failing agent loses share against an
equally loaded reliable one; a rare fault costs nothing."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reach.core.agents import AgentRecord, Capability, Declared
from reach.core.routing import Router
from reach.core.schemas import compile_schema
from reach.core.stats import DAY, MIN_CALLS, TRUSTED, DayRate, reliability
from reach.wire.protocol import CapabilitySpec

CAP = "text.embed"
NOW = 30 * DAY + 3600.0  # one hour into day 30


def agent(agent_id: str, max_concurrency: int = 10, **spec: object) -> AgentRecord:
    s = CapabilitySpec(name=CAP, **spec)  # type: ignore[arg-type]
    return AgentRecord(agent_id=agent_id, name=agent_id, version="1",
                       max_concurrency=max_concurrency,
                       capabilities={CAP: Capability(CAP, s, compile_schema({}))})


def fed(record: AgentRecord, ok: int, bad: int, now: float = NOW) -> AgentRecord:
    for i in range(ok + bad):
        record.outcome(CAP, i >= bad, now)
    return record


# ---------------------------------------------------------------- the window


def test_a_day_rate_counts_per_day_and_forgets_after_seven():
    rate = DayRate()
    assert rate.rate(NOW) is None and rate.counts(NOW) == (0, 0)
    rate.add(True, NOW - 6 * DAY)  # six days ago: still in
    rate.add(False, NOW - 7 * DAY)  # seven days ago: out
    rate.add(True, NOW)
    rate.add(False, NOW)
    assert rate.counts(NOW) == (2, 1)
    assert rate.rate(NOW) == pytest.approx(2 / 3)
    assert rate.counts(NOW + DAY) == (1, 1)  # the day six days back has now dropped out
    assert rate.counts(NOW - 8 * DAY) == (0, 0)  # (asked about before any of it)
    assert rate.counts(NOW - DAY) == (1, 0)  # the future is not counted (and day 23's
    # slot went to today)


def test_a_slot_reused_by_a_later_day_starts_empty():
    rate = DayRate(days=2, length=10.0)
    rate.add(False, 5.0)  # day 0
    rate.add(True, 25.0)  # day 2: the slot of day 0
    assert rate.counts(25.0) == (1, 0)
    rate.add(True, 26.0)
    assert rate.counts(26.0) == (2, 0)
    assert rate.stamp == [2, -1]


def test_a_day_rate_needs_a_horizon():
    for days, length in ((0, DAY), (7, 0.0), (7, -1.0)):
        with pytest.raises(ValueError, match="day rate"):
            DayRate(days, length)
    assert DayRate(1, 1.0).days == 1


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 20 * DAY)), max_size=60),
       st.floats(0, 20 * DAY))
def test_a_day_rate_is_the_count_of_the_last_seven_days(events, now):
    rate = DayRate()
    for ok, at in sorted(events, key=lambda e: e[1]):
        rate.add(ok, at)
    today = int(now // DAY)
    last = max((int(at // DAY) for _, at in events), default=-1)
    inside = [ok for ok, at in events if today - 7 < int(at // DAY) <= today]
    if last <= today:  # (a rate is read at or after its last event)
        assert rate.counts(now) == (sum(inside), len(inside) - sum(inside))
    assert sum(rate.ok) + sum(rate.bad) <= len(events)
    assert len(rate.ok) == 7  # bounded, whatever the traffic


def test_reliability_needs_evidence_and_forgives_a_rare_fault():
    assert reliability(0, MIN_CALLS - 1) == 1.0  # too few to judge
    assert reliability(10, 10) == 0.5
    assert reliability(99, 1) == 1.0 and TRUSTED == 0.99
    assert reliability(98, 2) == pytest.approx(0.98)
    assert reliability(0, MIN_CALLS) == 0.0
    assert reliability(0, 0) == 1.0


def test_trust_is_worked_out_again_after_an_add_and_on_a_new_day():
    rate = DayRate()
    for _ in range(20):
        rate.add(False, NOW)
    assert rate.trust(NOW) == 0.0
    for _ in range(20):
        rate.add(True, NOW)
    assert rate.trust(NOW) == 0.5  # the add made it stale
    assert rate.trust(NOW + 7 * DAY) == 1.0  # a week later: nothing left, full trust


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 2 * DAY), st.booleans()), max_size=200),
       st.sampled_from([0, 2, 200]))
def test_trust_read_between_adds_is_always_the_rate_of_the_moment(steps, every):
    """However adds and reads interleave (a success does not always make trust stale: from
    20 calls at 99 % or better it stays 1.0), a read equals ``reliability`` of the counts.
    ``every``: each ``every``-th call is a fault as well (0: only those drawn)."""
    rate, now = DayRate(), 0.0
    for i, (ok, gap, read) in enumerate(steps):
        now += gap / 50
        rate.add(ok and not (every and i % every == 0), now)
        if read:
            assert rate.trust(now) == reliability(*rate.counts(now))


# ---------------------------------------------------------------- on the record


def test_the_record_keeps_a_rate_per_capability_and_shows_the_total():
    record = fed(agent("a"), ok=30, bad=10)
    assert record.trust(CAP, NOW) == 0.75
    assert record.trust("other.cap", NOW) == 1.0
    view = record.view(NOW)
    assert view["success_7d"] == 0.75 and view["calls_7d"] == 40
    assert agent("b").view(NOW)["success_7d"] is None


def test_a_record_forgets_rates_of_capabilities_it_no_longer_declares():
    record = agent("a")
    record.outcome("old.cap", False, NOW)  # declared once, since re-registered without it
    assert set(record.days) == {"old.cap"}
    record.outcome(CAP, True, NOW)
    assert set(record.days) == {CAP}


def test_a_new_version_starts_with_a_clean_record():
    record = fed(agent("a"), ok=5, bad=30)
    record.prepare()  # (first registration: the record belongs to version 1)
    assert record.days and record.trust(CAP, NOW) == pytest.approx(5 / 35)
    record.prepare()
    assert record.days  # same version: kept
    record.version = "2"
    record.prepare()
    assert record.days == {} and record.trust(CAP, NOW) == 1.0


# ---------------------------------------------------------------- in the weighted score


def test_a_reliably_failing_agent_loses_to_an_equally_loaded_reliable_one():
    flaky, steady = fed(agent("flaky"), ok=30, bad=20), fed(agent("steady"), ok=50, bad=0)
    declaring = Declared.of(CAP, {"flaky": flaky, "steady": steady})
    router = Router(rng=random.Random(1))
    for load in range(10):
        flaky.inflight = steady.inflight = load
        assert router.pick(CAP, {}, "c", declaring, NOW) is steady
    # Load still counts: the reliable one, much busier, leaves work to the flaky one.
    flaky.inflight, steady.inflight = 0, 8
    assert router.pick(CAP, {}, "c", declaring, NOW) is flaky


def test_a_rare_fault_costs_no_share():
    one_fault, clean = fed(agent("one"), ok=199, bad=1), fed(agent("clean"), ok=200, bad=0)
    declaring = Declared.of(CAP, {"one": one_fault, "clean": clean})
    router = Router(rng=random.Random(2))
    got = Counter(router.pick(CAP, {}, "c", declaring, NOW).agent_id for _ in range(2000))
    assert got["one"] / 2000 == pytest.approx(0.5, abs=0.05)


def test_only_the_weighted_strategy_weighs_the_rate():
    flaky, steady = fed(agent("flaky"), ok=0, bad=40), agent("steady")
    steady.inflight = 5
    declaring = Declared.of(CAP, {"flaky": flaky, "steady": steady})
    assert Router(strategy="least_load").pick(CAP, {}, "c", declaring, NOW) is flaky


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 200), st.floats(0.0, 0.98), st.integers(0, 9), st.integers(0, 2**31))
def test_share_falls_with_the_failure_rate_at_equal_load(calls, rate, load, seed):
    """Property: at equal load, over random load levels, the reliable agent gets every pick
    against one that failed a share ``1 − rate`` of 20+ calls, whenever that costs it trust
    (below 99 %: a rounding to one fault in 200 does not, and is left out). It once let the
    reliable agent be busier by one slot now and then, which can outweigh a 98 % rate:
    the property then failed on some seeds, not the code."""
    bad = max(1, round(calls * (1 - rate)))
    flaky = fed(agent("flaky"), ok=calls - bad, bad=bad)
    steady = fed(agent("steady"), ok=calls, bad=0)
    assume(flaky.trust(CAP, NOW) < 1.0)
    declaring = Declared.of(CAP, {"flaky": flaky, "steady": steady})
    router = Router(rng=random.Random(seed))
    got: Counter[str] = Counter()
    for _ in range(50):
        flaky.inflight = steady.inflight = load
        got[router.pick(CAP, {}, "c", declaring, NOW).agent_id] += 1
    assert got == {"steady": 50}, got
    if flaky.trust(CAP, NOW) < 0.9:
        flaky.inflight = steady.inflight = load
        assert router.pick(CAP, {}, "c", declaring, NOW) is steady
