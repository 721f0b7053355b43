"""Intent routing learns from callers' choices (issue 30): a refusal offers the closest
capabilities and the words that matched each; a caller that picks one (``call_intent(...,
choose=...)``, REST ``choose``, or a submit naming both) teaches the phrase, and the same
request routes there next time, after a restart too. Only a capability routing itself offered
is learned; operators list and forget phrases (Python, admin feed, ``reach phrases``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from reach import Admin, NoRoute
from reach.core.intent import Decision
from reach.core.intent import Outcome as IntentOutcome
from reach.core.intent_learn import Learned, Phrase, teaches
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.gateway.admission import by_intent, chosen
from reach.testing import Cluster
from reach.wire.protocol import CapabilitySpec

CATALOGUE = {
    "returns.rate": dict(intents=["退货率是多少", "return rate"], tags=["returns", "退货"],
                         description="The share of orders customers sent back."),
    "refund.issue": dict(intents=["给客户退款", "refund the customer"], tags=["refund", "退款"],
                         description="Pay a customer's money back for an order."),
    "stock.query": dict(intents=["库存还有多少", "units in stock"], tags=["stock", "库存"],
                        description="Inventory on hand per SKU."),
}
# Words that touch returns and refunds both: routing refuses to pick between them.
BLURRY = "the customer sent it back, sort out the money"


def _registry() -> Registry:
    reg = Registry(LivenessPolicy())
    specs = [CapabilitySpec(name=n, **kw) for n, kw in CATALOGUE.items()]  # type: ignore[arg-type]
    reg.register(agent_id="a", name="ops", version="1", max_concurrency=1, specs=specs,
                 link=None, now=0.0)
    return reg


def test_a_refusal_says_which_words_matched_each_suggestion() -> None:
    with pytest.raises(NoRoute) as err:
        by_intent(_registry(), BLURRY)
    assert err.value.suggestions, err.value.message
    assert set(err.value.why) == set(err.value.suggestions) | set(err.value.candidates)
    assert "refund.issue" in err.value.why and "customer" in err.value.why["refund.issue"]
    assert err.value.message.endswith("or choose one for this intent and it is learned")


def test_only_a_capability_the_refusal_offered_is_learned() -> None:
    reg = _registry()
    with pytest.raises(NoRoute) as err:
        by_intent(reg, BLURRY)
    offered = err.value.suggestions
    assert "stock.query" not in offered
    assert chosen(reg, BLURRY, "stock.query", "mallory", 1.0) is None  # never offered
    assert len(reg.learned) == 0
    assert chosen(reg, "units in stock", "stock.query", "c", 1.0) is None  # routed already
    phrase = chosen(reg, BLURRY, "refund.issue", "c", 2.0)
    assert phrase == Phrase(BLURRY, "refund.issue", 2.0, "c")
    # The same request, whatever its case, width and punctuation, now routes there.
    assert by_intent(reg, BLURRY) == "refund.issue"
    assert by_intent(reg, "  The customer SENT it back -- sort out the money!! ") == \
        "refund.issue"


def test_a_learned_phrase_lends_its_words_to_no_other_request() -> None:
    # Routing another request stays as it was: the taught phrase's incidental word
    # ("warehouse") does not become refund.issue's evidence against stock.query.
    reg = _registry()
    other = "units in stock at the warehouse"
    assert by_intent(reg, other) == "stock.query"
    text = "the customer sent the order back, sort out the money, warehouse said so"
    with pytest.raises(NoRoute) as err:
        by_intent(reg, text)
    assert "refund.issue" in err.value.candidates
    key = reg.intent_key
    assert chosen(reg, text, "refund.issue", "c", 1.0) is not None
    assert reg.intent_key == key  # nor is the index built again for it
    assert by_intent(reg, text.upper()) == "refund.issue"
    assert by_intent(reg, other) == "stock.query"


def test_the_book_is_bounded_and_a_later_choice_replaces_an_earlier_one() -> None:
    book = Learned(limit=2)
    assert book.add(Phrase("one thing", "a.x", 1.0)) == []
    book.add(Phrase("One thing?", "b.x", 2.0))  # the same request: replaced
    assert [(p.text, p.capability) for p in book.phrases()] == [("One thing?", "b.x")]
    book.add(Phrase("two", "a.x", 3.0))
    dropped = book.add(Phrase("three", "a.x", 4.0))
    assert [p.text for p in dropped] == ["One thing?"]
    assert book.route("one thing") is None and book.route("THREE") == "a.x"
    assert book.remove("three!") is not None and book.route("three") is None
    assert book.remove("never learned") is None


def test_a_request_without_words_or_longer_than_500_characters_is_not_learned() -> None:
    """A phrase must have words to match again, and is at most 500 characters long
    (``MAX_PHRASE``): a longer request is routed as usual but not learned."""
    book = Learned()
    assert book.add(Phrase("?! ...", "a.x", 1.0)) == [] and len(book) == 0
    assert book.add(Phrase("w" * 501, "a.x", 1.0)) == [] and len(book) == 0
    assert book.add(Phrase("w" * 500, "a.x", 1.0)) == [] and book.route("W" * 500) == "a.x"


def test_a_choice_made_again_is_the_newest_and_the_oldest_goes_first() -> None:
    book = Learned(limit=2)
    book.add(Phrase("first", "a.x", 1.0))
    book.add(Phrase("second", "a.x", 2.0))
    book.add(Phrase("First!", "b.x", 3.0))  # chosen again: now the newest
    dropped = book.add(Phrase("third", "a.x", 4.0))
    assert [p.text for p in dropped] == ["second"]
    assert [(p.text, p.capability) for p in book.phrases()] == [("First!", "b.x"),
                                                                 ("third", "a.x")]


def test_a_coordinator_keeps_ten_thousand_phrases() -> None:
    book = Learned()
    for n in range(10_000):
        assert book.add(Phrase(f"phrase {n}", "a.x", float(n))) == []
    assert [p.text for p in book.add(Phrase("one more", "a.x", 1e4))] == ["phrase 0"]
    assert len(book) == 10_000 and book.route("phrase 1") == "a.x"


@pytest.mark.parametrize(("decision", "taught"), [
    (Decision(IntentOutcome.AMBIGUOUS, candidates=("refund.issue", "returns.rate")), True),
    (Decision(IntentOutcome.WEAK, suggestions=("refund.issue",)), True),
    (Decision(IntentOutcome.WEAK, candidates=("refund.issue",),
              suggestions=("stock.query",)), True),
    (Decision(IntentOutcome.WEAK, suggestions=("stock.query",)), False),  # not offered
    (Decision(IntentOutcome.MATCH, capability="stock.query",
              suggestions=("refund.issue",)), False),  # routing went somewhere already
    (Decision(IntentOutcome.EMPTY), False),
], ids=["a-candidate", "a-suggestion", "a-candidate-beside-a-suggestion", "not-offered",
        "routed-already", "no-words"])
def test_only_a_choice_among_what_a_refusal_offered_teaches(decision: Decision,
                                                            taught: bool) -> None:
    assert bool(teaches(decision, "refund.issue")) is taught


async def _returns(month: str = "this") -> str:
    return f"returns {month}"


async def _refund(order: str = "") -> str:
    return f"refunded {order}"


async def _stock() -> int:
    return 7


async def _serve(cluster: Cluster) -> None:
    await cluster.add_agent("ops", {"returns.rate": _returns, "refund.issue": _refund,
                                    "stock.query": _stock}, each=CATALOGUE)


async def test_a_choice_is_learned_kept_and_forgotten(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    cluster = await Cluster.start(store=store, http_port=0)
    try:
        await _serve(cluster)
        client = await cluster.client(caller="amy")
        with pytest.raises(NoRoute) as err:
            await client.call_intent(BLURRY, {"order": "A1"})
        assert "refund.issue" in err.value.suggestions and err.value.why["refund.issue"]
        # Choosing calls the capability with the params given, and teaches the phrase.
        assert await client.call_intent(BLURRY, {"order": "A1"},
                                        choose="refund.issue") == "refunded A1"
        assert await client.call_intent(BLURRY + "!", {"order": "A2"}) == "refunded A2"
        learned = cluster.reach.learned_phrases()
        assert [(p["text"], p["capability"], p["caller"]) for p in learned] == \
            [(BLURRY, "refund.issue", "amy")]
        # Over REST: a refused intent names the words, and "choose" teaches too.
        text = "customer returned the goods, money please"
        async with aiohttp.ClientSession() as http:
            base = cluster.reach.http_url
            async with http.post(f"{base}/v1/intent", json={"intent": text}) as resp:
                problem: dict[str, Any] = await resp.json()
            assert resp.status == 404 and problem["code"] == "no_route"
            assert set(problem["details"]["why"]) >= {"refund.issue"}
            async with http.post(f"{base}/v1/intent", json={
                    "intent": text, "choose": "refund.issue",
                    "params": {"order": "B"}}) as resp:
                assert resp.status == 200 and (await resp.json())["result"] == "refunded B"
        assert [p["text"] for p in cluster.reach.learned_phrases("refund.issue")] == \
            [BLURRY, text]
    finally:
        await cluster.close()

    # A restart on the same file routes the learned phrases as before; an operator lists
    # and forgets them over the admin feed.
    cluster = await Cluster.start(store=store)
    try:
        await _serve(cluster)
        client = await cluster.client()
        assert await client.call_intent(BLURRY, {"order": "C"}) == "refunded C"
        async with Admin.connect(cluster.url, token=cluster.reach.admin_token) as admin:
            assert [p["text"] for p in await admin.phrases()] == [BLURRY, text]
            assert await admin.phrases("stock.query") == []
            gone = await admin.forget_phrase(BLURRY.upper())
            assert gone["forgotten"] and gone["capability"] == "refund.issue"
            assert not (await admin.forget_phrase(BLURRY))["forgotten"]
            assert (await admin.forget_phrase(text))["forgotten"]
        with pytest.raises(NoRoute):
            await client.call_intent(BLURRY, {})
    finally:
        await cluster.close()
    cluster = await Cluster.start(store=store)  # forgotten in the store as well
    try:
        assert cluster.reach.learned_phrases() == []
    finally:
        await cluster.close()


async def test_a_caller_is_never_told_of_a_capability_it_may_not_call() -> None:
    cluster = await Cluster.start(tokens={"ops-secret": "ops", "clerk-secret": "clerk"},
                                  permissions={"clerk": ["stock.*", "returns.*"]})
    try:
        await cluster.add_agent("ops", {"returns.rate": _returns, "refund.issue": _refund,
                                        "stock.query": _stock},
                                token="ops-secret", each=CATALOGUE)
        clerk = await cluster.client("clerk", token="clerk-secret")
        with pytest.raises(NoRoute) as err:
            await clerk.call_intent(BLURRY, {})
        told = [*err.value.suggestions, *err.value.candidates, *err.value.why]
        assert told and "refund.issue" not in told and "refund.issue" not in err.value.message
        # A confident match on a capability it may not call is refused the same way.
        with pytest.raises(NoRoute) as sure:
            await clerk.call_intent("refund the customer for order 7", {})
        assert "refund.issue" not in sure.value.message
        assert "refund.issue" not in sure.value.suggestions
        assert await clerk.call_intent("units in stock for sku 9", {}) == 7
    finally:
        await cluster.close()
