"""Intent routing through the coordinator: a paraphrase reaches its capability, an ambiguous
request is refused with both candidates, a request nothing fits gets suggestions, and a
capability an agent registers later is found by the next request (issue 13, item 7)."""

from __future__ import annotations

import pytest

from reach import InvalidParams, NoRoute
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.gateway.admission import by_intent
from reach.testing import Cluster
from reach.wire.protocol import CapabilitySpec

REPORTS = {
    "report.daily": dict(intents=["生成日报", "daily report"], tags=["report", "报表"],
                         description="Build the daily operations report."),
    "report.weekly": dict(intents=["生成周报", "weekly report"], tags=["report", "报表"],
                          description="Build the weekly business report."),
}


def _registry() -> Registry:
    reg = Registry(LivenessPolicy())
    specs = [CapabilitySpec(name=name, **kw) for name, kw in REPORTS.items()]  # type: ignore[arg-type]
    reg.register(agent_id="r", name="reports", version="1", max_concurrency=1, specs=specs,
                 link=None, now=0.0)
    return reg


def test_by_intent_routes_a_paraphrase() -> None:
    assert by_intent(_registry(), "生成今天的日报") == "report.daily"
    assert by_intent(_registry(), "the weekly report for the board") == "report.weekly"


def test_an_ambiguous_intent_says_what_was_asked_and_both_candidates() -> None:
    with pytest.raises(NoRoute) as err:
        by_intent(_registry(), "帮我做个报表 report")
    assert err.value.message == ('"帮我做个报表 report" is ambiguous: report.daily or '
                                 'report.weekly? name one explicitly, or choose one for this '
                                 'intent and it is learned')
    assert err.value.candidates == ["report.daily", "report.weekly"]
    assert err.value.details["intent"] == "帮我做个报表 report"
    assert err.value.suggestions[:2] == ["report.daily", "report.weekly"]


def test_a_weak_intent_lists_the_closest_and_an_unknown_one_none() -> None:
    with pytest.raises(NoRoute) as weak:
        by_intent(_registry(), "build")  # one word both descriptions use: too little
    assert weak.value.message == ('no capability matches the intent "build" (closest: '
                                  'report.daily, report.weekly); name one explicitly, or '
                                  'choose one for this intent and it is learned')
    assert weak.value.suggestions == ["report.daily", "report.weekly"]
    assert weak.value.candidates == []
    with pytest.raises(NoRoute) as none:
        by_intent(_registry(), "book a flight")
    assert none.value.message == ('no capability matches the intent "book a flight"; '
                                  'name one explicitly')
    assert none.value.details == {"intent": "book a flight", "suggestions": []}


def test_an_intent_without_words_or_too_long_is_invalid_params() -> None:
    for text in ("", "  \t"):
        with pytest.raises(InvalidParams, match="name a capability or state an intent"):
            by_intent(_registry(), text)
    with pytest.raises(InvalidParams, match='the intent "！？。。" has no words to match'):
        by_intent(_registry(), "！？。。")
    with pytest.raises(InvalidParams, match="the intent is 10240 characters, more than 2000"):
        by_intent(_registry(), "日报" * 5120)


def test_the_message_echoes_a_long_or_multi_line_request_on_one_short_line() -> None:
    text = "报表 report\n" + "x" * 300
    with pytest.raises(NoRoute) as err:
        by_intent(_registry(), text)
    first = err.value.message.split(" is ambiguous")[0]
    assert first == '"报表 report ' + "x" * 70 + '…"'
    assert err.value.details["intent"] == text


async def test_call_intent_end_to_end(reach_cluster: Cluster) -> None:
    async def daily(day: str = "today") -> str:
        return f"daily {day}"

    async def weekly(week: str = "this") -> str:
        return f"weekly {week}"

    async def returns(month: str = "this") -> str:
        return f"returns {month}"

    await reach_cluster.add_agent("daily", {"report.daily": daily}, **REPORTS["report.daily"])
    await reach_cluster.add_agent("weekly", {"report.weekly": weekly},
                                  **REPORTS["report.weekly"])
    client = await reach_cluster.client()
    assert await client.call_intent("生成今天的日报", {"day": "mon"}) == "daily mon"
    assert await client.call_intent("put together the weekly report") == "weekly this"
    with pytest.raises(NoRoute) as ambiguous:
        await client.call_intent("帮我做个报表 report", {})
    assert ambiguous.value.candidates == ["report.daily", "report.weekly"]
    assert "report.daily or report.weekly" in ambiguous.value.message
    assert '"帮我做个报表 report"' in ambiguous.value.message

    # Nothing declares return rates yet; once an agent does, the next request finds it.
    with pytest.raises(NoRoute) as missing:
        await client.call_intent("查一下这个月的退货率是多少", {})
    assert missing.value.candidates == []
    await reach_cluster.add_agent("returns", {"returns.rate": returns},
                                  intents=["退货率是多少", "return rate"], tags=["退货"])
    assert await client.call_intent("查一下这个月的退货率是多少", {"month": "11"}) == \
        "returns 11"
