"""Intent routing (reach/core/intent.py): the index, the floor, the lead and margin on the
evidence only one capability has, candidates and suggestions, the incidents of issue 13,
hostile input, and the cache the registry keeps."""

from __future__ import annotations

import math
import time

import pytest

from reach.core import intent
from reach.core.intent import (
    Decision,
    Entry,
    Index,
    IndexCache,
    Outcome,
    build,
    distinct,
    rarity,
    resolve,
    score,
    weights,
)
from reach.core.intent_text import features
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.wire.protocol import CapabilitySpec

# Declared the way the field's agents declared them (issue 13).
FIELD = [
    Entry("sales.query", ("查一下销售额", "sales figures"), "Revenue by region and period.",
          ("sales",)),
    Entry("returns.rate", ("退货率是多少", "return rate"),
          "The share of orders customers sent back.", ("returns", "退货")),
    Entry("stock.query", ("库存还有多少", "units in stock"), "Inventory on hand per SKU.",
          ("inventory", "库存")),
    Entry("report.daily", ("生成日报", "daily report"), "Build the daily operations report.",
          ("report", "报表")),
    Entry("report.weekly", ("生成周报", "weekly report"), "Build the weekly business report.",
          ("report", "报表")),
    Entry("news.summarize", ("新闻摘要", "news digest"), "Summarize today's news.",
          ("news", "summary")),
    Entry("text.summarize", ("总结这段文字", "summarize this text"),
          "Summarize a long text.", ("summary",)),
]
INDEX = build(FIELD)


@pytest.mark.parametrize("text, capability", [
    ("查一下这个月的退货率是多少", "returns.rate"),   # went to sales.query
    ("查库存", "stock.query"),                        # found nothing
    ("今天的日报帮我做一下", "report.daily"),          # a tie with report.weekly
    ("我要做新闻摘要", "news.summarize"),              # no suggestion at all
])
def test_the_incidents_of_issue_13_never_go_wrong_and_offer_the_right_one_first(
        text: str, capability: str) -> None:
    """Issue 30 put precision first: each routes right, or is refused with the right
    capability first (a caller that picks it teaches the phrase); none goes elsewhere."""
    decision = resolve(text, INDEX)
    assert decision.capability in (None, capability)
    assert (decision.candidates or decision.suggestions)[0] == capability
    assert decision.suggestions[0] == capability


def test_the_runner_up_s_own_evidence_makes_a_refusal() -> None:
    # 查库存: 库存 is stock.query's alone, but 查 (in 查一下销售额) is sales.query's alone.
    decision = resolve("查库存", INDEX)
    assert decision.outcome is Outcome.AMBIGUOUS
    assert decision.candidates == ("stock.query", "sales.query")
    assert dict(decision.why) == {"stock.query": ("库存",), "sales.query": ("查",)}
    assert resolve("库存还剩多少件", INDEX).capability == "stock.query"  # nothing of sales


@pytest.mark.parametrize("text, capability", [
    ("what's the return rate for shoes", "returns.rate"),
    ("how many units are in stock", "stock.query"),
    ("the weekly report please", "report.weekly"),
    ("summarize this text for me", "text.summarize"),
    ("上季度华东区的销售额", "sales.query"),
    ("帮我 check 一下 ＳＫＵ－８８１ 的库存", "stock.query"),
    ("returns 退货率 by channel", "returns.rate"),
])
def test_english_chinese_and_mixed_text(text: str, capability: str) -> None:
    decision = resolve(text, INDEX)
    assert decision.capability == capability and decision.suggestions[0] == capability


def test_two_capabilities_that_fit_alike_are_candidates_not_a_guess() -> None:
    decision = resolve("生成一份报表 report", INDEX)
    assert decision.outcome is Outcome.AMBIGUOUS and decision.capability is None
    assert decision.candidates == ("report.daily", "report.weekly")
    assert decision.suggestions[:2] == ("report.daily", "report.weekly")
    weak = resolve("make a report", INDEX)  # under the floor: suggested, not candidates
    assert weak.outcome is Outcome.WEAK
    assert weak.suggestions[:2] == ("report.daily", "report.weekly")


def test_weak_evidence_is_refused_with_suggestions() -> None:
    decision = resolve("摘要", INDEX)  # one bigram of one intent: under the floor
    assert decision.outcome is Outcome.WEAK and decision.capability is None
    assert decision.suggestions == ("news.summarize",) and decision.candidates == ()
    nothing = resolve("book a flight to Paris", INDEX)
    assert nothing == Decision(Outcome.WEAK)


def test_empty_and_too_long_text_is_not_matched() -> None:
    for text in ("", "   ", "？？？", "!!!", "\x00\x01\x7f", "12345"):
        assert resolve(text, INDEX) == Decision(Outcome.EMPTY), text
    assert resolve("库存" * 1000, INDEX).outcome is Outcome.MATCH    # 2000
    assert resolve("x" * 2000, INDEX).outcome is Outcome.WEAK
    assert resolve("x" * 2001, INDEX) == Decision(Outcome.TOO_LONG)


def test_hostile_input_is_answered_fast() -> None:
    big = build(FIELD * 1 + [Entry(f"cap{i}.run", (f"做第{i}件事",), f"thing {i}")
                             for i in range(500)])
    texts = ["退货" * 5000, "a" * 10_000, "\x00" * 10_000, "查" + "\u202e" * 1999,
             "报表 " * 400, "的" * 2000, "🙂" * 2000]
    for text in texts:
        started = time.perf_counter()
        decision = resolve(text, big)
        took = time.perf_counter() - started
        assert decision.outcome in set(Outcome), text[:10]
        assert took < 1.0, (text[:10], took)  # generous: a shared machine; typically < 5 ms
    assert resolve("退货" * 5000, big).outcome is Outcome.TOO_LONG
    assert resolve("\x00" * 2000, big).outcome is Outcome.EMPTY
    assert resolve("报表 " * 400, big).suggestions[:2] == ("report.daily", "report.weekly")


def test_rarity_is_one_for_a_feature_of_one_capability_and_falls_with_use() -> None:
    assert rarity(1, 1) == 1.0
    assert rarity(24, 1) == 1.0
    assert rarity(24, 2) == pytest.approx(math.log(13) / math.log(25))
    assert rarity(24, 24) == pytest.approx(math.log(2) / math.log(25))
    assert rarity(500, 500) < rarity(500, 50) < rarity(500, 5) < 1.0


def test_weights_add_up_over_fields_and_saturate() -> None:
    entry = Entry("stock.query", ("库存", "库存 stock"), "stock on hand", ("stock",))
    got = weights(entry)
    # "stock": name 1.5 + intents 1.0 + tags 1.0 + description 0.5 = 4.0 → 2·4/5
    assert got["stock"] == pytest.approx(1.6)
    # 库存: two intents, 2.0 → 2·2/3
    assert got["库存"] == pytest.approx(4 / 3)
    # "query": the name only, 1.5 → 2·1.5/2.5
    assert got["query"] == pytest.approx(1.2)
    # "hand": the description only, 0.5 → 2·0.5/1.5
    assert got["hand"] == pytest.approx(2 / 3)
    assert weights(Entry("x.y")) == {}
    assert weights(Entry("a.b", tags=("after-sales", "on_hand"))) == {
        # a feature's own kind (a prefix is weak) counts on the request's side, not here
        "after": pytest.approx(1.0), "~afte": pytest.approx(1.0), "sal": pytest.approx(1.0),
        "~sale": pytest.approx(1.0), "hand": pytest.approx(1.0)}


def test_build_inverts_the_catalogue_in_name_order() -> None:
    index = build([Entry("b.run", ("税",)), Entry("a.run", ("税", "票"))])
    assert index.names == ("a.run", "b.run") and len(index) == 2
    shared = rarity(2, 2) * 2 * 1.0 / 2.0     # 税: one intent each
    assert index.postings["税"] == [(0, pytest.approx(shared)), (1, pytest.approx(shared))]
    assert index.postings["票"] == [(0, pytest.approx(1.0))]
    assert index.postings["run"] == [(0, pytest.approx(rarity(2, 2) * 1.2)),
                                     (1, pytest.approx(rarity(2, 2) * 1.2))]
    assert build([]) == Index((), {})


def test_score_sums_each_shared_feature_times_its_weight() -> None:
    index = build([Entry("b.run", ("税",)), Entry("a.run", ("税", "票"))])
    got = score(features("税 票 zzz"), index)
    shared = rarity(2, 2)
    assert got[0] == pytest.approx(0.5 * shared + 0.5 * 1.0)
    assert got[1] == pytest.approx(0.5 * shared)
    assert score(features("zzz"), index) == {}


def _index(**scores: float) -> Index:
    """An index where the word "ww" gives each capability exactly the score asked for."""
    return Index(tuple(scores), {"ww": [(n, s) for n, s in enumerate(scores.values())]})


def _two(a: tuple[float, float], b: tuple[float, float]) -> Index:
    """Capabilities a and b: "ww" gives each its first number, and "xx" (a's alone) and "yy"
    (b's alone) their second: what only one of them has is what tells them apart."""
    return Index(("a", "b"), {"ww": [(0, a[0]), (1, b[0])], "xx": [(0, a[1])],
                              "yy": [(1, b[1])]})


FLOOR, LEAD = intent.FLOOR, intent.LEAD


def test_the_floor_is_inclusive() -> None:
    assert resolve("ww", _index(a=FLOOR)).capability == "a"
    assert resolve("ww", _index(a=FLOOR - 1e-4)).outcome is Outcome.WEAK
    assert resolve("ww", _index(a=FLOOR - 1e-4)).suggestions == ("a",)


def test_a_lead_is_evidence_the_runner_up_does_not_have() -> None:
    # Shared evidence alone tells nothing: a tie on "ww" however far apart the totals.
    decision = resolve("ww", _index(a=FLOOR + 1, b=0.3))
    assert decision.outcome is Outcome.AMBIGUOUS and decision.candidates == ("a", "b")
    assert resolve("ww", _index(b=FLOOR, a=FLOOR)).candidates == ("a", "b")  # a tie: by name
    # Evidence of its own (at least LEAD) and none for the runner-up: routed.
    assert resolve("ww xx", _two((FLOOR, LEAD), (1.9, 0.0))).capability == "a"
    assert resolve("ww xx", _two((FLOOR, LEAD - 1e-4), (1.9, 0.0))).outcome is \
        Outcome.AMBIGUOUS
    # The runner-up with any evidence of its own (MARGIN 1.0): refused with both.
    both = resolve("ww xx yy", _two((FLOOR, 3.0), (0.1, 0.01)))
    assert both.outcome is Outcome.AMBIGUOUS and both.candidates == ("a", "b")


def test_a_single_capability_needs_only_the_floor() -> None:
    decision = resolve("ww", _index(only=FLOOR + 0.1))
    assert decision == Decision(Outcome.MATCH, "only", (), ("only",))
    assert decision.scores == (("only", round(FLOOR + 0.1, 4)),)
    # Scores are shown to four places; the decision uses them whole.
    assert resolve("ww", _index(a=0.123456)).scores == (("a", 0.1235),)
    assert resolve("ww", _index(a=FLOOR - 4e-5)).outcome is Outcome.WEAK
    assert resolve("ww", _index(a=0.24996)).suggestions == ()


def test_suggestions_are_the_best_four_with_enough_evidence() -> None:
    decision = resolve("ww", _index(a=0.5, b=0.4, c=0.3, d=0.29, e=0.2))
    assert decision.outcome is Outcome.WEAK
    assert decision.suggestions == ("a", "b", "c", "d")
    low = resolve("ww", _index(a=0.7, b=0.25, c=0.2499))
    assert low.suggestions == ("a", "b")
    assert low.scores == (("a", 0.7), ("b", 0.25), ("c", 0.2499))


def test_the_cache_builds_once_per_key_and_reweighs_only_what_changed() -> None:
    cache = IndexCache()
    calls: list[int] = []

    def catalogue(entries: list[Entry]) -> list[Entry]:
        calls.append(len(entries))
        return entries

    first = cache.get(1, lambda: catalogue(FIELD))
    assert cache.get(1, lambda: catalogue(FIELD)) is first and calls == [7]
    kept = cache._weights[FIELD[0]]
    assert kept == weights(FIELD[0])
    more = [*FIELD, Entry("tax.compute", ("算一下税",), "Compute the tax due.", ("tax",))]
    second = cache.get(2, lambda: catalogue(more))
    assert second is not first and calls == [7, 8]
    assert cache._weights[FIELD[0]] is kept           # not weighed again
    assert resolve("算一下税 tax", second).capability == "tax.compute"
    assert resolve("算一下税 tax", first).capability is None
    fewer = cache.get(3, lambda: catalogue(FIELD[:2]))
    assert set(cache._weights) == set(FIELD[:2]) and len(fewer) == 2
    assert cache.get(None, lambda: catalogue([])).names == ()    # a None key still builds


def _spec(name: str, **kw: object) -> CapabilitySpec:
    return CapabilitySpec(name=name, **kw)  # type: ignore[arg-type]


def _register(reg: Registry, agent: str, *specs: CapabilitySpec, version: str = "1") -> None:
    reg.register(agent_id=agent, name=agent, version=version, max_concurrency=1,
                 specs=list(specs), link=None, now=0.0)


def test_the_registry_catalogue_merges_what_every_agent_says() -> None:
    reg = Registry(LivenessPolicy())
    _register(reg, "a", _spec("stock.query", intents=["库存", "stock level"], tags=["inventory"],
                              description="Stock on hand"))
    _register(reg, "b", _spec("stock.query", intents=["stock level", "on hand"],
                              tags=["inventory", "warehouse"], description="Per warehouse"),
              _spec("sales.query"))
    _register(reg, "c", _spec("sales.query", description="Sales"))  # b's says nothing
    assert sorted(reg.catalogue(), key=lambda e: e.name) == [
        Entry("sales.query", description="Sales"),
        Entry("stock.query", ("库存", "stock level", "on hand"), "Stock on hand\nPer warehouse",
              ("inventory", "warehouse"))]


def test_the_registry_index_is_rebuilt_only_when_what_capabilities_say_changes() -> None:
    reg = Registry(LivenessPolicy())
    assert reg.catalogue_version == 0 and len(reg.intent_index()) == 0
    _register(reg, "a", _spec("stock.query", intents=["库存"]))
    assert reg.catalogue_version == 1
    index = reg.intent_index()
    assert reg.intent_index() is index
    assert resolve("查一下库存 stock", index).capability == "stock.query"
    assert resolve("算一下税", index).capability is None
    # The same agent coming back saying the same: the index stays.
    _register(reg, "a", _spec("stock.query", intents=["库存"]), version="2")
    assert reg.catalogue_version == 1 and reg.intent_index() is index
    # Another agent declaring a new capability: the next request sees it.
    _register(reg, "b", _spec("tax.compute", intents=["算一下税"], tags=["税"]))
    assert reg.catalogue_version == 2 and reg.intent_index() is not index
    assert resolve("算一下税", reg.intent_index()).capability == "tax.compute"
    # Any change of intents, tags or description moves the version.
    for change in ({"intents": ["库存", "stock"]}, {"tags": ["x"]}, {"description": "d"}):
        before = reg.catalogue_version
        _register(reg, "a", _spec("stock.query", **change))
        assert reg.catalogue_version == before + 1, change
    # So does dropping a capability the agent declared before.
    before = reg.catalogue_version
    _register(reg, "b")
    assert reg.catalogue_version == before + 1
    assert resolve("算一下税", reg.intent_index()).capability is None


def test_a_failed_registration_changes_nothing() -> None:
    reg = Registry(LivenessPolicy())
    with pytest.raises(ValueError):
        _register(reg, "a", _spec("x.get", intents=["x"]), _spec("x.get"))
    assert reg.catalogue_version == 0


def test_the_module_constants_are_what_the_docs_say() -> None:
    assert (intent.MAX_TEXT, intent.FLOOR, intent.LEAD, intent.MARGIN) == (2000, 2.4, 1.0, 1.0)
    assert (intent.SUGGEST, intent.SUGGESTIONS) == (0.25, 4)


def test_a_refusal_shows_at_most_four_words_per_capability_strongest_first() -> None:
    index = Index(("a",), {w: [(0, s)] for w, s in
                           (("aa", 0.1), ("bb", 0.2), ("cc", 0.3), ("dd", 0.4), ("ee", 0.5))})
    decision = resolve("aa bb cc dd ee", index)
    assert decision.outcome is Outcome.WEAK  # 1.5 of evidence, under the floor
    assert decision.why == (("a", ("ee", "dd", "cc", "bb")),)
    assert intent.WHY_WORDS == 4


def test_a_word_s_strength_is_its_own_weight_times_its_weight_in_the_index() -> None:
    # "ww" (a word: 1.0) × 0.3 = 0.3 against 税 (one character: 0.5) × 0.9 = 0.45.
    decision = resolve("ww 税", Index(("a",), {"ww": [(0, 0.3)], "税": [(0, 0.9)]}))
    assert decision.why == (("a", ("税", "ww")),)


def test_decisions_are_equal_by_what_was_decided_not_by_scores_or_why() -> None:
    assert Decision(Outcome.WEAK, scores=(("a", 0.3),), why=(("a", ("ww",)),)) == \
        Decision(Outcome.WEAK)
    assert Decision(Outcome.MATCH, "a") != Decision(Outcome.MATCH, "a", learned=True)
    routed = resolve("ww", _index(a=FLOOR))
    assert routed.capability == "a" and routed.learned is False


def test_a_learned_phrase_routes_first_while_its_capability_is_in_the_index() -> None:
    asked: list[str] = []

    def learned(text: str) -> str | None:
        asked.append(text)
        return {"ww": "b", "gone": "z"}.get(text)

    index = _index(a=FLOOR + 1, b=0.3)  # by evidence: ambiguous between a and b
    taught = resolve("ww", index, learned)
    assert taught == Decision(Outcome.MATCH, capability="b", learned=True)
    assert taught.scores == () and taught.suggestions == ()
    # A capability no longer in the index, or no phrase: the evidence decides, as without.
    assert resolve("gone", index, learned) == resolve("gone", index)
    assert resolve("gone", index, learned).learned is False
    assert resolve("ww ww", index, learned) == resolve("ww ww", index)
    assert asked == ["ww", "gone", "gone", "ww ww"]
    # Too long is refused before anything is looked up.
    assert resolve("w" * (intent.MAX_TEXT + 1), index, learned).outcome is Outcome.TOO_LONG
    assert len(asked) == 4


def test_distinct_evidence_is_what_only_one_of_the_two_has_times_the_request_s_weight() -> None:
    index = _two((1.0, 0.5), (0.8, 0.25))
    # "ww" both have; "xx" (a's: 0.5) and "yy" (b's: 0.25) count, each times its own weight.
    assert distinct({"ww": 1.0, "xx": 2.0, "yy": 4.0}, index, 0, 1) == (1.0, 1.0)
    assert distinct({"ww": 1.0, "xx": 2.0, "yy": 4.0}, index, 1, 0) == (1.0, 1.0)
    assert distinct({"xx": 0.5, "yy": 2.0}, index, 0, 1) == (0.25, 0.5)
    assert distinct({"ww": 3.0}, index, 0, 1) == (0.0, 0.0)


def test_the_cache_says_whether_it_built_and_for_which_key() -> None:
    cache = IndexCache()
    assert cache.built is False
    assert cache.key not in (None, 0, 1, "", ())  # no key equals it before the first build
    calls: list[int] = []

    def catalogue(entries: list[Entry]) -> list[Entry]:
        calls.append(len(entries))
        return entries

    # Stale is fine, but there is nothing yet: it builds.
    first = cache.get(1, lambda: catalogue(FIELD), stale_ok=True)
    assert cache.built is True and cache.key == 1 and calls == [7] and len(first) == 7
    # A new key with stale_ok: the index held, nothing built, the key unchanged.
    assert cache.get(2, lambda: catalogue(FIELD[:2]), stale_ok=True) is first
    assert cache.key == 1 and calls == [7]
    # Without it: built for the new key.
    second = cache.get(2, lambda: catalogue(FIELD[:2]))
    assert len(second) == 2 and cache.key == 2 and calls == [7, 2]
