"""A big catalogue's intent index is rebuilt on a worker thread (reach.server.intent_index)
when a request finds it stale, never on a registration alone: that request and those after
it route with the index before the change until the new one is installed; a build overtaken
by a newer change is dropped and the next request asks again; a small catalogue keeps
building on demand."""

from __future__ import annotations

import asyncio

import pytest

from reach import NoRoute
from reach.core.intent_learn import Phrase
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.gateway.admission import by_intent
from reach.server.intent_index import IntentIndexer
from reach.wire.protocol import CapabilitySpec

RETURNS = CapabilitySpec(name="returns.rate", intents=["退货率是多少", "return rate"],
                         description="The share of orders customers sent back.")
REFUND = CapabilitySpec(name="refund.issue", intents=["给客户退款", "refund the customer"],
                        description="Pay a customer's money back.")
STOCK = CapabilitySpec(name="stock.query", intents=["库存还有多少", "units in stock"],
                       description="Inventory on hand.")


def _register(reg: Registry, name: str, *specs: CapabilitySpec) -> None:
    reg.register(agent_id=name, name=name, version="1", max_concurrency=1, specs=list(specs),
                 link=None, now=0.0)


async def test_a_big_catalogue_is_indexed_off_the_loop_when_a_request_needs_it() -> None:
    reg = Registry(LivenessPolicy())
    indexer = IntentIndexer(reg, off_loop_at=1)
    _register(reg, "a", RETURNS, STOCK)
    assert by_intent(reg, "return rate this month") == "returns.rate"  # first: on demand
    _register(reg, "b", REFUND)
    await indexer.wait()
    assert reg.intent_cache.key != reg.intent_key  # a registration alone builds nothing
    with pytest.raises(NoRoute):  # the index before the change: refund.issue not in it yet
        by_intent(reg, "please refund the customer")
    await indexer.wait()  # ... and that request had it rebuilt on a worker thread
    assert reg.intent_cache.key == reg.intent_key
    assert by_intent(reg, "please refund the customer") == "refund.issue"
    # A learned phrase routes at once, by the book, before the index has its words.
    reg.learned.add(Phrase("sort out the money", "refund.issue", 1.0))
    assert by_intent(reg, "Sort out the money!") == "refund.issue"
    await indexer.wait()
    await indexer.close()


async def test_a_change_during_a_build_is_built_by_the_next_request() -> None:
    reg = Registry(LivenessPolicy())
    indexer = IntentIndexer(reg, off_loop_at=1)
    _register(reg, "a", RETURNS)
    by_intent(reg, "return rate")
    _register(reg, "b", REFUND)
    with pytest.raises(NoRoute):
        by_intent(reg, "units in stock for sku 9")  # a build starts ...
    await asyncio.sleep(0)                           # (on its worker thread now)
    _register(reg, "c", STOCK)                       # ... and this lands while it runs
    await indexer.wait()
    assert reg.intent_cache.key != reg.intent_key    # not installed: it was out of date
    with pytest.raises(NoRoute):
        by_intent(reg, "units in stock for sku 9")
    await indexer.wait()
    assert by_intent(reg, "units in stock for sku 9") == "stock.query"
    await indexer.close()


def test_a_small_catalogue_builds_on_demand() -> None:
    reg = Registry(LivenessPolicy())
    IntentIndexer(reg)  # 64 capabilities before it moves off the loop; no loop here anyway
    _register(reg, "a", RETURNS)
    _register(reg, "b", REFUND)
    assert by_intent(reg, "refund the customer") == "refund.issue"
    assert reg.intent_cache.key == reg.intent_key
