"""Drill: a capability goes down and its callers are answered by a declared fallback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from reach import ReachError, TaskError, TaskFailed
from reach.sdk.fallback import Answer
from reach.testing import Cluster

DEFAULT = {"rate": 1.0, "source": "default"}


async def test_a_capability_down_is_answered_by_its_static_fallback_labelled(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """Field: "Breaker opened at 50 % errors in 30 s: caller P99 went from 12 s to 800 ms" —
    lesson: fail fast, *degrade*. Teams fall back to a default answer when a capability is
    down (issue 13). The rates agent's database is gone: every call faults. The capability
    declares a static fallback, so callers get the default, labelled as a fallback (reason
    ``fault`` while attempts still fail, ``unavailable`` once the breaker is open and no
    agent may be tried), never a dead letter; ``await client.call`` still returns the plain
    value; the task view and the metrics count it."""
    cluster = await cluster_factory(breaker_open_for=30.0)
    up = {"ok": True}

    async def rates(pair: str) -> dict[str, Any]:
        if not up["ok"]:
            raise RuntimeError("database unreachable")
        return {"rate": 1.1, "source": "live"}

    await cluster.add_agent("rates", {"rates.get": rates}, idempotent=True,
                            fallback={"value": DEFAULT})
    client = await cluster.client("shop")
    live = await client.call("rates.get", {"pair": "EURUSD"}, timeout=5, detail=True)
    assert live == Answer({"rate": 1.1, "source": "live"}, None)

    up["ok"] = False
    handle = await client.submit("rates.get", {"pair": "EURUSD"}, timeout=5)
    assert await handle.result() == DEFAULT
    assert handle.fallback is not None and handle.fallback.kind == "value"
    assert handle.fallback.reason == "fault"
    view = await client.status(handle.task_id)
    assert view["state"] == "succeeded" and view["fallback"] == {"kind": "value",
                                                                 "reason": "fault"}
    assert view["history"][-1]["note"] == "fallback: value (fault)"
    assert [a["outcome"] for a in view["attempts"]] == ["fault"] * 3  # tried, then degraded

    reasons = []
    for _ in range(4):  # the breaker opens on the faults; then nothing is even tried
        answer = await client.call("rates.get", {"pair": "EURUSD"}, timeout=5, detail=True)
        assert answer.value == DEFAULT and answer.fallback is not None
        reasons.append(answer.fallback.reason)
    assert reasons[-1] == "unavailable"
    assert await client.call("rates.get", {"pair": "EURUSD"}, timeout=5) == DEFAULT  # plain
    assert cluster.reach.dead_letters() == []
    assert cluster.reach.metrics()["capabilities"]["rates.get"]["fallbacks"] == 6


async def test_last_good_is_served_with_its_age_and_only_to_its_own_caller(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """A ``last_good`` fallback serves the last result for the same params, saying how old
    it is; for other params (none kept) the task fails as it would have; and another caller
    is never served what this caller's call produced (results are private to their caller).
    (One attempt per call: the agent's breaker stays closed, each failure is its fault.)"""
    cluster = await cluster_factory(max_retries=0)
    up = {"ok": True}

    async def stock(sku: str) -> dict[str, Any]:
        if not up["ok"]:
            raise RuntimeError("warehouse offline")
        return {"sku": sku, "on_hand": 7}

    await cluster.add_agent("stock", {"stock.query": stock}, idempotent=True,
                            fallback={"last_good": {"max_age_s": 600}})
    shop, other = await cluster.client("shop"), await cluster.client("other")
    assert await shop.call("stock.query", {"sku": "a1"}, timeout=5) == {"sku": "a1", "on_hand": 7}

    up["ok"] = False
    answer = await shop.call("stock.query", {"sku": "a1"}, timeout=5, detail=True)
    assert answer.value == {"sku": "a1", "on_hand": 7}
    assert answer.fallback is not None and answer.fallback.kind == "last_good"
    assert answer.fallback.age_s is not None and 0 <= answer.fallback.age_s < 60
    with pytest.raises(TaskFailed, match="warehouse offline"):
        await shop.call("stock.query", {"sku": "b2"}, timeout=5)  # nothing kept for b2
    with pytest.raises(TaskFailed, match="warehouse offline"):
        await other.call("stock.query", {"sku": "a1"}, timeout=5)  # shop's, not other's


async def test_a_fallback_to_another_capability_is_routed_and_never_loops(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """The caller falls back to a cached capability: the call is routed to it as the same
    caller (its permissions apply), labelled with the capability and the task that answered.
    Two capabilities that fall back on each other, both down, end in an error, not a loop."""
    cluster = await cluster_factory(permissions={"shop": ("quote.*", "cache.*"),
                                                 "guest": ("quote.*",)})

    async def down(item: str) -> Any:
        raise RuntimeError("pricing engine crashed")

    async def cached(item: str) -> dict[str, Any]:
        return {"item": item, "price": 9.5, "cached": True}

    await cluster.add_agent("pricing", {"quote.live": down}, idempotent=True)
    await cluster.add_agent("cache", {"cache.quote": cached}, idempotent=True)
    await cluster.add_agent("ping", {"quote.ping": down}, fallback={"capability": "quote.pong"})
    await cluster.add_agent("pong", {"quote.pong": down}, fallback={"capability": "quote.ping"})
    shop, guest = await cluster.client("shop"), await cluster.client("guest")

    handle = await shop.submit("quote.live", {"item": "x"}, timeout=5,
                               fallback={"capability": "cache.quote"})
    assert await handle.result() == {"item": "x", "price": 9.5, "cached": True}
    assert handle.fallback is not None and handle.fallback.kind == "capability"
    assert handle.fallback.capability == "cache.quote" and handle.fallback.reason == "fault"
    other = await shop.status(handle.fallback.task_id or "")
    assert other["capability"] == "cache.quote" and other["caller"] == "shop"
    assert other["trace_id"] == handle.trace_id  # one trace for the call and its fallback

    with pytest.raises(TaskFailed) as refused:  # guest may not call cache.*
        await guest.call("quote.live", {"item": "x"}, timeout=5,
                         fallback={"capability": "cache.quote"})
    assert "unauthorized" in str(refused.value.details.get("fallback"))

    with pytest.raises(TaskFailed) as looped:
        await shop.call("quote.ping", {"item": "x"}, timeout=5)
    assert "'quote.pong' failed too" in str(looped.value.details.get("fallback"))
    assert len(cluster.reach.dead_letters(capability="quote.pong")) == 1  # followed once


async def test_a_task_error_answer_is_not_replaced_by_the_fallback(
        cluster_factory: Callable[..., Awaitable[Cluster]]) -> None:
    """A deliberate answer is the answer: a ``TaskError`` reaches the caller as it is, even
    when the capability and the caller both declare a fallback; so does a refusal before
    acceptance (``invalid_params``)."""
    cluster = await cluster_factory()

    async def rates(pair: str) -> dict[str, Any]:
        raise TaskError(f"unknown pair {pair!r}")

    await cluster.add_agent("rates", {"rates.get": rates}, fallback={"value": DEFAULT},
                            params={"type": "object", "required": ["pair"]})
    client = await cluster.client("shop")
    with pytest.raises(TaskError, match="unknown pair 'XXXYYY'"):
        await client.call("rates.get", {"pair": "XXXYYY"}, timeout=5,
                          fallback={"value": {"rate": 0}})
    with pytest.raises(ReachError) as refused:
        await client.call("rates.get", {}, timeout=5)
    assert refused.value.code == "invalid_params"
    assert cluster.reach.metrics()["capabilities"]["rates.get"]["fallbacks"] == 0
