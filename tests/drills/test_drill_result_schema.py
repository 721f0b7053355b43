"""Drill: a bad deploy renames a result field; the declared result schema catches it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from reach import Agent, TaskFailed
from reach.testing import Cluster

QUOTE = "price.quote"    # idempotent: a bad result is retried elsewhere
COMMIT = "price.commit"  # not idempotent, served by v2 alone: nothing else can answer
RETURNS = {"type": "object", "required": ["quote"],
           "properties": {"quote": {"type": "object", "required": ["total"],
                                    "properties": {"total": {"type": "number"}}}}}


async def _pricing(cluster: Cluster, version: str, weight: float,
                   handler: Callable[..., Any], *, commit: bool = False) -> Agent:
    agent = Agent(f"pricing-v{version}", version=version, reconnect_base=0.02)
    agent.capability(QUOTE, returns=RETURNS, idempotent=True, weight=weight)(handler)
    if commit:
        agent.capability(COMMIT, returns=RETURNS, scope="write")(handler)
    await agent.connect(cluster.url)
    cluster.agents.append(agent)
    return agent


async def test_a_renamed_result_field_fails_over_to_v1_and_opens_v2s_breaker(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "A renamed request field made downstream agents silently read empty values for
    five days" — lesson: versioned frames and schemas. Here the rename is in a result: v2 of
    the pricing agent answers ``{"quote": {"amount": …}}`` where the declared ``returns``
    schema says ``total``. Routing prefers v2 (weight 1000 against 10), yet every call of the
    idempotent quote succeeds with the right shape via v1; v2's faults open its breaker within
    the breaker's minimum of calls, after which it gets no more quotes; and a call only v2
    can answer is dead-lettered as ``bad_result`` naming the agent, its version and the JSON
    path, instead of reaching the caller as a result with an empty total."""
    cluster = await cluster_factory(breaker_open_for=30.0)  # stays open for the whole drill
    served: dict[str, int] = {"1": 0, "2": 0}

    async def v1(item: str) -> dict[str, Any]:
        served["1"] += 1
        return {"quote": {"total": 12.5, "item": item}}

    async def v2(item: str) -> dict[str, Any]:
        served["2"] += 1
        return {"quote": {"amount": 12.5, "item": item}}  # the renamed field

    await _pricing(cluster, "1", 10, v1)
    await _pricing(cluster, "2", 1000, v2, commit=True)
    client = await cluster.client("shop")

    for i in range(20):
        got = await client.call(QUOTE, {"item": f"sku-{i}"}, timeout=5)
        assert got == {"quote": {"total": 12.5, "item": f"sku-{i}"}}
    assert served["1"] == 20
    assert 5 <= served["2"] <= 6, served  # min_calls of faults opens it; then no more quotes
    views = {a["name"]: a for a in cluster.reach.agents()}
    assert views["pricing-v2"]["breaker"] == "open"
    assert views["pricing-v1"]["breaker"] == "closed"
    assert cluster.reach.dead_letters(capability=QUOTE) == []

    # Nothing else serves the commit: its breaker open, v2 gets the call only as the last
    # resort (an early half-open probe), breaks the schema again, and the letter says why.
    with pytest.raises(TaskFailed) as failed:
        await client.call(COMMIT, {"item": "sku-x"}, timeout=5)
    remote = failed.value.details["remote"]
    assert remote["code"] == "bad_result" and remote["agent"] == "pricing-v2"
    assert remote["details"]["version"] == "2"
    assert remote["details"]["errors"] == [
        {"path": "$.quote", "message": "result.quote must contain ['total'] properties"}]
    [letter] = cluster.reach.dead_letters(capability=COMMIT)
    assert letter["error"]["details"]["remote"]["code"] == "bad_result"
    assert "$.quote" in letter["attempts"][-1]["error"]
