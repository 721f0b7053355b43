"""Intent routing: Chinese and English text find the right capability; no match says what's close."""

from __future__ import annotations

import pytest

from reach import NoRoute
from reach.core.intent import rank, resolve
from reach.testing import Cluster

CATALOGUE = {
    "sales.query": ["查一下销售额", "sales figures", "revenue by region"],
    "stock.query": ["库存还有多少", "how many units in stock"],
    "report.generate": ["写一份报告", "write a quarterly report"],
}


@pytest.mark.parametrize("text, expected", [
    ("查一下上季度华东区的销售额", "sales.query"),
    ("what were the sales figures for east in Q3", "sales.query"),
    ("仓库里这个商品的库存", "stock.query"),
    ("how many units of SKU-1 are in stock", "stock.query"),
    ("请帮我写一份季度报告", "report.generate"),
    ("write the quarterly report for the board", "report.generate"),
])
def test_resolves_chinese_and_english(text: str, expected: str) -> None:
    found, closest = resolve(text, CATALOGUE)
    assert found == expected
    assert closest[0] == expected


def test_no_match_returns_none() -> None:
    found, closest = resolve("book a flight to Paris", CATALOGUE)
    assert (found, closest) == (None, [])


def test_common_words_weigh_less_than_distinctive_ones() -> None:
    ranked = rank("query the stock", CATALOGUE)
    assert ranked[0].capability == "stock.query"
    assert ranked[0].score > ranked[1].score > 0  # "query" is shared by two capabilities


async def test_call_intent_end_to_end(reach_cluster: Cluster) -> None:
    async def sales(region: str = "east") -> str:
        return f"sales {region}"

    async def stock(sku: str = "x") -> str:
        return f"stock {sku}"

    await reach_cluster.add_agent("sales", {"sales.query": sales},
                                  intents=["查一下销售额", "sales figures"])
    await reach_cluster.add_agent("inventory", {"stock.query": stock},
                                  intents=["库存", "units in stock"])
    client = await reach_cluster.client()
    assert await client.call_intent("查一下上季度华东区的销售额", {"region": "华东"}) == "sales 华东"
    assert await client.call_intent("how many units in stock for SKU-9", {"sku": "9"}) == "stock 9"
    with pytest.raises(NoRoute) as err:
        await client.call_intent("book a flight", {})
    assert "intent" in err.value.message
