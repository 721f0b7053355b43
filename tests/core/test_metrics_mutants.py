"""reach.core.metrics, pinned where mutation testing found it loose (issue 17).

The latency window covers the last 1000 successes (older ones are forgotten, so a bad hour
does not haunt the P95 forever), every percentile of the view, milliseconds rounded to the
microsecond, which outcomes count as faults, and that a retry or a rejection without an agent
counts for the capability and the totals only.
"""

from __future__ import annotations

from reach.core.metrics import WINDOW, Metrics, Series


def test_the_latency_window_is_the_last_thousand_successes() -> None:
    """Twenty slow calls, then a thousand fast ones: the slow ones are out of the window."""
    assert WINDOW == 1000
    s = Series()
    for _ in range(20):
        s.latencies.add(10.0)
    for _ in range(999):
        s.latencies.add(0.001)
    assert len(s.latencies) == 1000
    assert s.quantile(1.0) == 10000.0  # the last slow one is still in
    s.latencies.add(0.001)
    assert s.quantile(1.0) == 1.0


def test_the_view_has_every_percentile_in_milliseconds_to_the_microsecond() -> None:
    s = Series()
    assert s.view() == {"calls": 0, "succeeded": 0, "answers": 0, "faults": 0, "retries": 0,
                        "rejections": 0, "fallbacks": 0, "inflight": 0, "p50_ms": None, "p90_ms": None,
                        "p95_ms": None, "p99_ms": None}
    for ms in range(1, 101):
        s.latencies.add(ms / 1000 + 0.0000004)
    view = s.view()
    assert [view[k] for k in ("p50_ms", "p90_ms", "p95_ms", "p99_ms")] == \
        [51.0, 91.0, 96.0, 100.0]
    s = Series()
    s.latencies.add(0.0012346)
    assert s.view()["p50_ms"] == s.view()["p99_ms"] == 1.235


def test_only_agent_faults_count_as_faults() -> None:
    """A caller's own deadline or a cancelled hedge is not the agent's fault; a timeout, a
    lost link or an exception is."""
    m = Metrics()
    for outcome in ("caller_deadline", "cancelled", "answer", "ok", "timeout", "lost", "fault"):
        m.dispatched("c.get", "one")
        m.ended("c.get", "one", outcome, 0.5)
    one = m.snapshot()["agents"]["one"]
    assert (one["calls"], one["faults"], one["answers"], one["succeeded"]) == (7, 3, 1, 1)
    assert one["inflight"] == 0 and m.p95_ms("one") == 500.0


def test_a_retry_or_rejection_without_an_agent_counts_for_the_capability_and_totals() -> None:
    m = Metrics()
    m.retried("c.get", None)
    m.rejected("c.get")
    snap = m.snapshot()
    assert snap["agents"] == {}
    assert (snap["capabilities"]["c.get"]["retries"], snap["totals"]["retries"]) == (1, 1)
    assert (snap["capabilities"]["c.get"]["rejections"], snap["totals"]["rejections"]) == (1, 1)
    m.retried("c.get", "one")
    m.retried("b.get", "one")
    snap = m.snapshot()
    assert list(snap["capabilities"]) == ["b.get", "c.get"]
    assert snap["agents"]["one"]["retries"] == 2 and snap["totals"]["retries"] == 3


def test_a_fallback_answer_counts_once_for_its_capability_and_the_totals() -> None:
    """A task answered by its fallback (no agent took it) is counted where an operator looks
    for it: the capability and the totals, one per answer, never under an agent."""
    m = Metrics()
    m.fell_back("c.get")
    m.fell_back("c.get")
    m.fell_back("b.get")
    snap = m.snapshot()
    assert snap["agents"] == {}
    assert snap["capabilities"]["c.get"]["fallbacks"] == 2
    assert snap["capabilities"]["b.get"]["fallbacks"] == 1
    assert snap["totals"]["fallbacks"] == 3


def test_each_view_covers_its_own_last_thousand_successes_across_agents() -> None:
    """Kept once per (capability, agent), the windows still read as three separate ones
    would: the capability's and the totals' last 1000 span both agents, in the order the
    calls ended; each agent's, its own."""
    m = Metrics()
    for _ in range(WINDOW):
        m.dispatched("c.get", "fast")
        m.ended("c.get", "fast", "ok", 0.001)
    for _ in range(WINDOW // 2):
        m.dispatched("c.get", "slow")
        m.ended("c.get", "slow", "ok", 0.5)
    m.dispatched("d.put", "fast")
    m.ended("d.put", "fast", "ok", 0.002)
    snap = m.snapshot()
    cap = snap["capabilities"]["c.get"]
    assert (cap["calls"], cap["p50_ms"], cap["p90_ms"]) == (1500, 500.0, 500.0)
    assert snap["capabilities"]["d.put"]["p99_ms"] == 2.0
    assert snap["agents"]["fast"]["p50_ms"] == 1.0 and snap["agents"]["fast"]["calls"] == 1001
    assert (snap["agents"]["slow"]["p50_ms"], m.p95_ms("slow"), m.p95_ms("none")) == (
        500.0, 500.0, None)
    total = snap["totals"]
    # The last 1000 of all: the d.put call, 500 slow, 499 fast (the oldest fast ones out).
    assert (total["calls"], total["succeeded"], total["p50_ms"]) == (1501, 1501, 500.0)
    assert total["p90_ms"] == 500.0 and Series().view()["p50_ms"] is None


def test_a_view_keeps_the_newest_successes_not_the_slowest() -> None:
    """An agent's thousand slow calls, then another's thousand fast ones: the capability's
    window holds the fast ones only (the newest), however slow the older ones were."""
    m = Metrics()
    for name, took in (("old", 0.9), ("new", 0.001)):
        for _ in range(WINDOW):
            m.dispatched("c.get", name)
            m.ended("c.get", name, "ok", took)
    snap = m.snapshot()
    assert snap["capabilities"]["c.get"]["p99_ms"] == snap["totals"]["p99_ms"] == 1.0
    assert snap["agents"]["old"]["p50_ms"] == 900.0
