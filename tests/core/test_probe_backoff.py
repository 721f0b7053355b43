"""The probe rule's backoff for a held agent and its news of a failure (issue 25, item 12),
with plain calls: a dead service's check fails the instant it is sent, and must not be sent
again at once, forever."""

from __future__ import annotations

import pytest

from reach.core.probes import ProbeBook, ProbePolicy, Verdict


def failing(b: ProbeBook, key: str, probe_id: int, at: float, words: str = "refused",
            took: float = 0.001) -> Verdict:
    send, _ = b.due(at)
    assert send == [key], (at, b.next_at())
    b.sent(key, probe_id, at)
    verdict = b.answered(key, probe_id, at + took, ok=False, detail=words)
    assert verdict is not None
    return verdict


def test_a_held_agent_is_checked_after_a_doubling_backoff_up_to_the_interval() -> None:
    b = ProbeBook(ProbePolicy(interval=16.0, slow=5.0, suspect_after=2))
    b.track("a", now=0.0)
    first = failing(b, "a", 1, 16.0)
    assert first.change is None and b.next_at() == pytest.approx(16.001)  # confirm at once
    second = failing(b, "a", 2, 16.001)
    assert second.change == "suspect"
    state = b.states["a"]
    assert state.streak == 2 and b.retry_after(state) == 1.0  # interval/16
    at = b.next_at()
    assert at == pytest.approx(16.002 + 1.0)
    gaps = []
    for probe_id in range(3, 9):
        prev = at
        assert at is not None
        failing(b, "a", probe_id, at)
        at = b.next_at()
        assert at is not None
        gaps.append(round(at - prev - 0.001, 6))
    assert gaps == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0]  # doubling, then the interval
    assert b.due(at - 0.01) == ([], [])  # nothing before it is due


def test_retry_after_counts_from_suspect_after() -> None:
    b = ProbeBook(ProbePolicy(interval=32.0, suspect_after=3))
    state = b.track("a", now=0.0)
    expected = {0: 0.0, 1: 0.0, 2: 0.0, 3: 2.0, 4: 4.0, 5: 8.0, 6: 16.0, 7: 32.0, 8: 32.0,
                40: 32.0}
    for streak, delay in expected.items():
        state.streak = streak
        assert b.retry_after(state) == delay, streak


def test_a_fast_pass_after_the_backoff_restores_and_the_next_is_an_interval_away() -> None:
    b = ProbeBook(ProbePolicy(interval=16.0, slow=5.0))
    b.track("a", now=0.0)
    failing(b, "a", 1, 16.0)
    failing(b, "a", 2, 16.001)
    at = b.next_at()
    assert at is not None
    b.due(at)
    b.sent("a", 3, at)
    back = b.answered("a", 3, at + 0.01)
    assert back == Verdict(slow=False, ms=pytest.approx(10.0), change="restore", news=True)
    assert b.next_at() == pytest.approx(at + 0.01 + 16.0)


def test_news_is_a_change_of_the_failure_not_each_failure() -> None:
    b = ProbeBook(ProbePolicy(interval=1.0, slow=5.0))
    b.track("a", now=0.0)
    said = []
    at = 1.0
    for probe_id, words in enumerate(["refused", "refused", "refused", "503", "503",
                                      "refused"], 1):
        verdict = failing(b, "a", probe_id, at, words)
        said.append((words, verdict.news, b.states["a"].failing))
        at = b.next_at() or at
    assert said == [("refused", True, "refused"), ("refused", False, "refused"),
                    ("refused", False, "refused"), ("503", True, "503"), ("503", False, "503"),
                    ("refused", True, "refused")]
    # a failure without words is "failed"; an ok answer that is slow changes nothing
    failing(b, "a", 10, at, "")
    assert b.states["a"].failing == "failed"
    at = b.next_at() or at
    b.due(at)
    b.sent("a", 11, at)
    slow_ok = b.answered("a", 11, at + 6.0)
    assert slow_ok is not None and slow_ok.slow and not slow_ok.news
    assert b.states["a"].failing == "failed"
    at = b.next_at() or at
    b.due(at)
    b.sent("a", 12, at)
    passed = b.answered("a", 12, at + 0.1)
    assert passed is not None and passed.news and b.states["a"].failing is None
    at = b.next_at() or at
    b.due(at)
    b.sent("a", 13, at)
    again = b.answered("a", 13, at + 0.1)
    assert again is not None and not again.news  # passing again and again is no news


def test_a_late_answer_is_no_news_and_frees_a_place_at_once() -> None:
    b = ProbeBook(ProbePolicy(interval=10.0, slow=1.0))
    b.track("a", now=0.0)
    b.due(10.0)
    b.sent("a", 1, 10.0)
    b.due(11.0)  # unanswered past slow: judged, and the next sent at once
    b.sent("a", 2, 11.0)
    b.due(12.0)
    late = b.answered("a", 1, 12.5, ok=False, detail="refused")
    assert late is not None and late.late and not late.news
    assert b.states["a"].failing is None
    assert b.due(12.5)[0] == ["a"]  # a place is free: the next goes at once
