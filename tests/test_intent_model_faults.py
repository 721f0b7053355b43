"""The model extra's routing when the model misbehaves (reach.server.intent_routing): a model
that cannot embed the catalogue leaves routing lexical and says why once; a request that
comes before the catalogue is embedded is routed by the words alone (the coordinator does not
wait for the model); a stop while the catalogue is being embedded does not wait for it. A
stand-in model is injected: the model itself is tested in test_intent_model*.py."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.tasks import SubmitRequest
from reach.server.intent_index import IntentIndexer
from reach.server.intent_routing import ModelRouting
from reach.wire.protocol import CapabilitySpec


class StandIn:
    """A model with nothing embedded; ``catalogue`` fails, or blocks until released."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.release = threading.Event()
        self.started = threading.Event()
        self.asked = 0

    def ready(self, key: Hashable) -> None:
        return None

    def catalogue(self, key: Hashable, entries: Callable[[], Any]) -> None:
        self.asked += 1
        self.started.set()
        if self.fail:
            raise RuntimeError("the weights file is truncated")
        self.release.wait(5)


def register(registry: Registry) -> None:
    spec = CapabilitySpec(name="refund.issue", intents=["refund the customer"])
    registry.register(agent_id="a", name="ops", version="1", max_concurrency=1, specs=[spec],
                      link=None, now=0.0)


async def test_a_model_that_cannot_embed_leaves_routing_lexical_and_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry(LivenessPolicy())
    model = StandIn(fail=True)
    routing = ModelRouting(registry, model=model)
    caplog.set_level(logging.ERROR, logger="reach.intent")
    register(registry)  # the catalogue moved: embed it, off the loop
    await routing.wait()
    assert model.asked == 1
    [said] = [r for r in caplog.records if "could not embed" in r.getMessage()]
    assert "routing lexically" in said.getMessage()
    request = SubmitRequest("", {}, "amy", intent="refund the customer")
    assert await routing.route(request) is request  # the gateway routes it by the words
    await routing.close()


async def test_a_stop_while_the_catalogue_is_embedded_does_not_wait_for_it() -> None:
    registry = Registry(LivenessPolicy())
    model = StandIn()
    routing = ModelRouting(registry, model=model)
    register(registry)
    await asyncio.to_thread(model.started.wait, 5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await routing.close()
    assert loop.time() - started < 1.0
    model.release.set()


def test_changes_with_no_loop_running_wait_for_the_first_request() -> None:
    registry = Registry(LivenessPolicy())
    model = StandIn()
    ModelRouting(registry, model=model)
    register(registry)  # a registry driven by plain calls: nothing to embed on
    assert model.asked == 0


# ---------------------------------------------------------------- the lexical index off the loop


def second(registry: Registry) -> None:
    spec = CapabilitySpec(name="stock.query", intents=["units in stock"])
    registry.register(agent_id="b", name="stock", version="1", max_concurrency=1, specs=[spec],
                      link=None, now=0.0)


def test_with_no_loop_the_index_is_built_on_demand() -> None:
    registry = Registry(LivenessPolicy())
    IntentIndexer(registry, off_loop_at=1)
    register(registry)
    assert registry.resolve_intent("refund the customer").capability == "refund.issue"
    second(registry)
    registry.resolve_intent("units in stock")  # no loop to build on: routed by the old index
    assert registry.resolve_intent("units in stock").capability == "stock.query"  # built


async def test_a_rebuild_under_way_is_not_started_twice_and_a_stop_ends_it() -> None:
    registry = Registry(LivenessPolicy())
    indexer = IntentIndexer(registry, off_loop_at=1)
    register(registry)
    assert registry.resolve_intent("refund the customer").capability == "refund.issue"
    second(registry)
    # Routed by the index before the change while it is rebuilt off the loop, once.
    assert registry.resolve_intent("units in stock").capability is None
    assert registry.resolve_intent("units in stock").capability is None
    await indexer.close()
    await indexer.wait()
    again = IntentIndexer(registry, off_loop_at=1)
    registry.resolve_intent("units in stock")
    await again.wait()
    assert registry.resolve_intent("units in stock").capability == "stock.query"
