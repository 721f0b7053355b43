"""Intent routing with a model, the pure half (reach/core/intent_fusion.py): the lexical
evidence and the model's cosine per capability fused into one score, and the same refusal
rules as ``intent.resolve`` (MATCH / AMBIGUOUS / WEAK with suggestions, best first)."""

from __future__ import annotations

import pytest

from reach.core.intent import SUGGESTIONS, Outcome
from reach.core.intent_fusion import (
    CALIBRATED,
    MODEL_ALONE,
    Calibration,
    decide,
    fused,
)

# Even weights, so the numbers below can be worked out by hand: lexical 1.0 counts
# 1 / (1 + 1) = 0.5, a cosine of 0.9 counts (0.9 - 0.8) / 0.2 = 0.5.
EVEN = Calibration(weight=0.5, half=1.0, zero=0.8, floor=0.4, gap=0.1, suggest=0.2)


def test_the_fused_score_mixes_both_halves_by_weight() -> None:
    ranked = fused({"sales.query": 1.0}, {"sales.query": 0.9, "returns.rate": 0.9}, EVEN)
    assert ranked == [("sales.query", pytest.approx(0.5)), ("returns.rate", pytest.approx(0.25))]


def test_a_cosine_below_zero_counts_nothing_and_above_one_counts_in_full() -> None:
    ranked = dict(fused({}, {"far": 0.3, "near": 1.0, "odd": 1.5}, EVEN))
    assert ranked == {"far": 0.0, "near": pytest.approx(0.5), "odd": pytest.approx(0.5)}


def test_lexical_evidence_saturates_so_many_words_cannot_outvote_the_model() -> None:
    wordy = dict(fused({"a": 100.0}, {"a": 0.8, "b": 1.0}, EVEN))
    assert wordy["a"] < 0.5 == pytest.approx(wordy["b"])


def test_a_capability_missing_from_the_model_counts_as_unrelated() -> None:
    assert dict(fused({"a": 1.0}, {}, EVEN)) == {"a": pytest.approx(0.25)}


def test_ties_are_broken_by_name_so_the_order_is_stable() -> None:
    ranked = fused({}, {"b.two": 0.9, "a.one": 0.9, "c.three": 0.95}, EVEN)
    assert [name for name, _ in ranked] == ["c.three", "a.one", "b.two"]


def test_a_confident_match_is_routed() -> None:
    decision = decide({"sales.query": 2.0, "returns.rate": 0.3},
                      {"sales.query": 0.95, "returns.rate": 0.82, "stock.query": 0.81}, EVEN)
    assert decision.outcome is Outcome.MATCH
    assert decision.capability == "sales.query"
    assert decision.suggestions == ("sales.query",)
    assert decision.scores[0][0] == "sales.query"


def test_two_close_capabilities_are_ambiguous_not_guessed() -> None:
    decision = decide({"refund.issue": 1.0, "returns.rate": 1.0},
                      {"refund.issue": 0.92, "returns.rate": 0.91}, EVEN)
    assert decision.outcome is Outcome.AMBIGUOUS
    assert decision.capability is None
    assert decision.candidates == ("refund.issue", "returns.rate")
    assert decision.suggestions == ("refund.issue", "returns.rate")


def test_nothing_close_enough_is_weak_with_the_closest_as_suggestions_best_first() -> None:
    decision = decide({"weather.forecast": 0.2},
                      {"weather.forecast": 0.9, "news.summarize": 0.89, "email.send": 0.81,
                       "tax.compute": 0.6}, EVEN)
    assert decision.outcome is Outcome.WEAK
    assert decision.capability is None
    assert decision.suggestions == ("weather.forecast", "news.summarize")  # ≥ suggest
    assert [name for name, _ in decision.scores] == [
        "weather.forecast", "news.summarize", "email.send", "tax.compute"][:SUGGESTIONS]


def test_at_most_as_many_suggestions_as_the_lexical_matcher() -> None:
    decision = decide({}, {f"cap.{i}": 0.89 for i in range(6)}, EVEN)
    assert decision.outcome is Outcome.WEAK
    assert len(decision.suggestions) == SUGGESTIONS == 4


def test_nothing_at_all_is_weak_without_suggestions() -> None:
    decision = decide({}, {})
    assert decision.outcome is Outcome.WEAK
    assert decision.suggestions == () and decision.scores == ()


def test_a_lone_capability_above_the_floor_is_routed() -> None:
    assert decide({"a": 5.0}, {"a": 0.99}, EVEN).capability == "a"


def test_the_model_alone_ignores_the_lexical_evidence() -> None:
    model = {"a": 0.95, "b": 0.86}
    assert decide({"b": 50.0}, model, MODEL_ALONE) == decide({}, model, MODEL_ALONE)


@pytest.mark.parametrize("calibration", [CALIBRATED, MODEL_ALONE])
def test_the_calibrated_constants_route_a_clear_request_and_refuse_an_unrelated_one(
        calibration: Calibration) -> None:
    clear = decide({"sales.query": 3.0}, {"sales.query": 0.95, "returns.rate": 0.80},
                   calibration)
    assert clear.capability == "sales.query"
    unrelated = decide({}, {"sales.query": 0.79, "returns.rate": 0.78}, calibration)
    assert unrelated.outcome is Outcome.WEAK


@pytest.mark.parametrize("bad", [dict(weight=1.5), dict(weight=-0.1), dict(half=0.0),
                                 dict(zero=1.0)])
def test_nonsense_constants_are_refused(bad: dict[str, float]) -> None:
    values = dict(weight=0.5, half=1.0, zero=0.8, floor=0.4, gap=0.1, suggest=0.2) | bad
    with pytest.raises(ValueError):
        Calibration(**values)


@pytest.mark.parametrize("edge", [dict(weight=0.0), dict(weight=1.0), dict(zero=-1.0),
                                  dict(zero=0.999)])
def test_constants_at_their_edges_are_accepted(edge: dict[str, float]) -> None:
    values = dict(weight=0.5, half=1.0, zero=0.8, floor=0.4, gap=0.1, suggest=0.2) | edge
    assert Calibration(**values) == Calibration(**values)


@pytest.mark.parametrize("bad", [dict(zero=-1.5), dict(zero=1.5), dict(half=-1.0)])
def test_constants_past_their_edges_are_refused(bad: dict[str, float]) -> None:
    values = dict(weight=0.5, half=1.0, zero=0.8, floor=0.4, gap=0.1, suggest=0.2) | bad
    with pytest.raises(ValueError):
        Calibration(**values)


# Numbers that are exact in binary, so a score can sit exactly on a threshold: lexical 1.0
# counts 0.5 × 1 / (1 + 1) = 0.25; a cosine of 1.0 counts 0.5 × (1 - 0.5) / 0.5 = 0.5.
EXACT = Calibration(weight=0.5, half=1.0, zero=0.5, floor=0.75, gap=0.5, suggest=0.25)


def test_a_score_exactly_on_the_floor_and_a_lead_exactly_the_gap_are_routed() -> None:
    # a: 0.25 + 0.5 = 0.75, the floor; b: 0.25 + 0 = 0.25, exactly 0.5 behind.
    decision = decide({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 0.5}, EXACT)
    assert decision.outcome is Outcome.MATCH and decision.capability == "a"
    # ... and b, exactly on ``suggest``, is suggested.
    assert decision.suggestions == ("a", "b")


def test_a_hair_under_the_floor_or_the_gap_is_refused() -> None:
    below_floor = decide({"a": 1.0}, {"a": 0.999}, EXACT)
    assert below_floor.outcome is Outcome.WEAK
    short_lead = decide({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 0.501}, EXACT)
    assert short_lead.outcome is Outcome.AMBIGUOUS
    assert short_lead.candidates == ("a", "b")


def test_shown_scores_are_rounded_to_four_places() -> None:
    # 0.5 × 1 / (1 + 2) = 0.1666…
    decision = decide({"a": 1.0}, {}, Calibration(weight=0.5, half=2.0, zero=0.5, floor=0.9,
                                                  gap=0.1, suggest=0.1))
    assert decision.scores == (("a", 0.1667),)


def test_many_ties_come_out_in_name_order_whatever_order_they_came_in() -> None:
    names = [f"cap.{c}" for c in "hgfedcba"]
    assert [n for n, _ in fused({}, {n: 0.9 for n in names}, EVEN)] == sorted(names)
    assert [n for n, _ in fused({n: 1.0 for n in names}, {}, EVEN)] == sorted(names)
