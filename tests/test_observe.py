"""Observation path: events, metrics, traces with per-hop timings, /metrics, JSON logs, HTML."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from reach import Context, TaskError, TaskFailed
from reach.config import loopback as _loopback
from reach.core.metrics import Metrics
from reach.core.tasks import Attempt, Envelope, TaskState, new_task
from reach.core.traces import hops, summary, timeline
from reach.gateway.events import EventBus
from reach.testing import Cluster, ManualClock, wait_until

S = TaskState


# ---------------------------------------------------------------- event bus (pure)


async def test_bus_costs_nothing_without_listeners_and_bounds_slow_readers() -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    bus.publish("task", {"n": 0})
    assert not bus.active
    sub = bus.subscribe(maxsize=3)
    for n in range(5):
        bus.publish("task", {"n": n})
    events = sub.drain()
    assert [e.data["n"] for e in events] == [2, 3, 4]  # the oldest went first
    assert sub.dropped == 2
    assert [e.seq for e in events] == [3, 4, 5]
    waiting = asyncio.ensure_future(sub.wait(0.5))
    await clock.advance(0.499)
    assert not waiting.done()
    await clock.advance(0.001)
    assert waiting.result() is False  # nothing came within the wait, on the bus's clock
    waiting = asyncio.ensure_future(sub.wait(0.5))
    await clock.settle()
    bus.publish("task", {"n": 9})
    await clock.settle()
    assert waiting.result() is True and sub.drain()[0].at == clock.wall()
    sub.close()
    assert not bus.active


def test_a_failing_listener_is_removed_and_others_carry_on() -> None:
    bus = EventBus(ManualClock())
    seen: list[int] = []

    def broken(_e: Any) -> None:
        raise RuntimeError("listener bug")

    bus.listen(broken)
    stop = bus.listen(lambda e: seen.append(e.data["n"]))
    bus.publish("task", {"n": 1})
    bus.publish("task", {"n": 2})
    assert seen == [1, 2]
    stop()
    assert not bus.active


# ---------------------------------------------------------------- metrics (pure)


def test_metrics_count_per_capability_agent_and_total() -> None:
    m = Metrics()
    for ms in range(1, 101):
        m.dispatched("a.get", "one")
        m.ended("a.get", "one", "ok", ms / 1000)
    m.dispatched("a.get", "two")
    m.ended("a.get", "two", "timeout", 1.0)
    m.dispatched("a.get", "two")
    m.ended("a.get", "two", "answer", 0.01)
    m.dispatched("a.get", "two")
    m.ended("a.get", "two", "cancelled", 0.0)  # a hedge that lost: not a fault
    m.retried("a.get", "two")
    m.rejected("a.get")
    snap = m.snapshot()
    cap = snap["capabilities"]["a.get"]
    assert (cap["calls"], cap["succeeded"], cap["faults"], cap["answers"]) == (103, 100, 1, 1)
    assert (cap["retries"], cap["rejections"], cap["inflight"]) == (1, 1, 0)
    assert (cap["p50_ms"], cap["p90_ms"], cap["p99_ms"]) == (51.0, 91.0, 100.0)
    assert snap["agents"]["two"]["faults"] == 1 and snap["agents"]["two"]["rejections"] == 0
    assert snap["totals"]["calls"] == 103
    assert m.p95_ms("one") == 96.0 and m.p95_ms("nobody") is None


# ---------------------------------------------------------------- traces (pure)


def _task(task_id: str, parent: str | None, capability: str, created: float) -> Any:
    env = Envelope(task_id=task_id, trace_id="tr", capability=capability, params={},
                   caller="planner", idempotency_key=task_id, created_at=created,
                   parent_task_id=parent)
    return new_task(env, created)


def test_hops_cover_queue_delivery_processing_retry_and_done() -> None:
    t = _task("t1", None, "x.get", 10.0)
    t.move(S.QUEUED, 10.001, "waiting for a free slot")
    t.attempts.append(Attempt(1, "a1", "one", 10.002))
    t.move(S.DISPATCHED, 10.002, "attempt 1 to one")
    t.move(S.RUNNING, 10.003, "acknowledged")
    t.move(S.RETRYING, 10.010, "retry 1 in 5 ms: boom")
    t.attempts.append(Attempt(2, "a2", "two", 10.015))
    t.move(S.DISPATCHED, 10.015, "attempt 2 to two")
    t.move(S.SUCCEEDED, 10.020)  # answered without a separate ack
    got = [(h["phase"], h["agent"], h["failed"], h["duration_ms"]) for h in hops(t)]
    assert got == [("queued", None, False, 2.0), ("delivered", "one", False, 1.0),
                   ("processing", "one", True, 7.0), ("retry", None, False, 5.0),
                   ("processing", "two", False, 5.0), ("done", "two", False, 0.0)]


def test_summary_names_the_deepest_failure_as_the_origin() -> None:
    a, b, c = _task("a", None, "a.plan", 1.0), _task("b", "a", "b.fetch", 1.1), \
        _task("c", "b", "c.query", 1.2)
    for task, at in ((c, 1.3), (b, 1.4), (a, 1.5)):
        task.move(S.FAILED, at, "boom")
    head = summary("tr", [a, b, c])
    assert head["root"] == "a.plan" and head["state"] == "failed"
    assert head["failed_capability"] == "c.query"
    assert head["duration_ms"] == 500.0
    line = timeline("tr", [c, a, b])
    assert [t["depth"] for t in line["tasks"]] == [0, 1, 2]


def test_a_running_trace_has_no_end() -> None:
    t = _task("t", None, "x.get", 5.0)
    t.attempts.append(Attempt(1, "a", "one", 5.1))
    t.move(S.DISPATCHED, 5.1, "attempt 1 to one")
    assert summary("tr", [t])["ended_at"] is None
    assert hops(t)[-1]["end"] is None


# ---------------------------------------------------------------- live: trace of a chain


async def test_three_hop_chain_where_c_fails_is_traced_end_to_end() -> None:
    cluster = await Cluster.start()
    try:
        async def plan(ctx: Context) -> Any:
            return await ctx.call("b.fetch", {})

        async def fetch(ctx: Context) -> Any:
            return await ctx.call("c.query", {})

        async def query() -> Any:
            raise TaskError("table missing", code="missing")

        await cluster.add_agent("A", {"a.plan": plan})
        await cluster.add_agent("B", {"b.fetch": fetch})
        await cluster.add_agent("C", {"c.query": query})
        client = await cluster.client("planner")
        handle = await client.submit("a.plan", {},
                                     traceparent="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
        try:
            await handle.result(timeout=5)
        except TaskFailed:
            pass
        trace = cluster.reach.trace(handle.trace_id)
        tasks = trace.tasks
        assert [(t["capability"], t["depth"], t["state"]) for t in tasks] == [
            ("a.plan", 0, "failed"), ("b.fetch", 1, "failed"), ("c.query", 2, "failed")]
        assert trace.timeline["trace_id"] == handle.trace_id
        summary_ = cluster.reach.trace_summary(handle.trace_id)
        assert summary_["failed_capability"] == "c.query" and summary_["tasks"] == 3
        failing = [h for h in trace.hops if h["failed"] and h["phase"] == "done"]
        assert {h["capability"] for h in failing} == {"a.plan", "b.fetch", "c.query"}
        for task_hops in ({h["phase"] for h in trace.hops if h["capability"] == c}
                          for c in ("a.plan", "b.fetch", "c.query")):
            assert {"queued", "processing", "done"} <= task_hops
        assert all(h["duration_ms"] is not None and h["duration_ms"] >= 0 for h in trace.hops)
        starts = [h["start"] for h in trace.hops]
        assert starts == sorted(starts)
        # the events list is still the plain ordered list it always was
        assert [e["at"] for e in trace] == sorted(e["at"] for e in trace)
        assert "c.query" in trace._repr_html_() and "<table>" in trace._repr_html_()
    finally:
        await cluster.close()


# ---------------------------------------------------------------- /metrics and JSON logs


async def test_metrics_endpoint_serves_prometheus_text() -> None:
    cluster = await Cluster.start()
    try:
        async def echo(n: int) -> int:
            return n

        async def broken() -> None:
            raise RuntimeError("boom")

        await cluster.add_agent("one", {"x.echo": echo, "x.broken": broken}, idempotent=True)
        client = await cluster.client()
        for n in range(5):
            assert await client.call("x.echo", {"n": n}) == n
        try:
            await client.call("x.broken", {}, max_retries=1)
        except TaskFailed:
            pass
        url = cluster.url.replace("ws://", "http://") + "/metrics"
        async with httpx.AsyncClient() as http:
            response = await http.get(url)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(response.text)
                   for s in family.samples}
        assert samples[("reach_capability_calls_total", (("capability", "x.echo"),))] == 5
        assert samples[("reach_capability_faults_total", (("capability", "x.broken"),))] == 2
        assert samples[("reach_capability_retries_total", (("capability", "x.broken"),))] == 1
        assert samples[("reach_agent_succeeded_total", (("agent", "one"),))] == 5
        assert samples[("reach_agents", (("state", "online"),))] == 1
        assert samples[("reach_dead_letters", ())] == 1
        assert ("reach_capability_latency_seconds",
                (("capability", "x.echo"), ("quantile", "0.99"))) in samples
        py = cluster.reach.metrics()
        assert py["capabilities"]["x.echo"]["calls"] == 5
        assert py["totals"]["faults"] == 2
    finally:
        await cluster.close()


def test_metrics_answer_loopback_peers_only_by_default() -> None:
    assert _loopback("127.0.0.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("10.1.2.3") and not _loopback("")


async def test_json_logs_one_line_per_transition(caplog: Any) -> None:
    cluster = await Cluster.start(json_logs=True)
    try:
        async def echo(n: int) -> int:
            return n

        await cluster.add_agent("one", {"x.echo": echo})
        client = await cluster.client("planner")
        with caplog.at_level(logging.INFO, logger="reach.events"):
            handle = await client.submit("x.echo", {"n": 1})
            await handle.result(timeout=5)
            await wait_until(lambda: any('"succeeded"' in r.message for r in caplog.records))
        lines = [json.loads(r.message) for r in caplog.records if r.name == "reach.events"]
        mine = [ln for ln in lines if ln["event"] == "task" and ln["task_id"] == handle.task_id]
        assert [ln["state"] for ln in mine][0] == "pending"
        assert mine[-1]["state"] == "succeeded"
        last = mine[-1]
        for field in ("trace_id", "task_id", "capability", "caller", "agent", "state",
                      "cost_ms", "timestamp"):
            assert field in last
        assert (last["caller"], last["agent"], last["capability"]) == ("planner", "one",
                                                                       "x.echo")
        assert last["cost_ms"] >= 0
    finally:
        await cluster.close()


async def test_reach_and_agents_render_as_html() -> None:
    cluster = await Cluster.start()
    try:
        async def echo() -> int:
            return 1

        await cluster.add_agent("<one>", {"x.echo": echo})
        html = cluster.reach._repr_html_()
        assert "&lt;one&gt;" in html and "<one>" not in html  # names are escaped
        assert "online" in cluster.reach.agents()._repr_html_()
        assert cluster.reach.agents()[0]["p95_ms"] is None
        await (await cluster.client()).call("x.echo", {})
        assert cluster.reach.agents()[0]["p95_ms"] is not None
    finally:
        await cluster.close()


async def test_events_see_every_kind_of_change() -> None:
    cluster = await Cluster.start(max_retries=0)
    try:
        sub = cluster.reach.events.subscribe()

        async def broken() -> None:
            raise RuntimeError("boom")

        await cluster.add_agent("one", {"x.broken": broken})
        client = await cluster.client()
        for _ in range(5):
            try:
                await client.call("x.broken", {})
            except TaskFailed:
                pass
        cluster.reach.admin_action("replay", {"task_id": "t"}, ok=False)
        await asyncio.sleep(0)
        kinds = {e.kind for e in sub.drain()}
        assert {"agent", "task", "breaker", "dead_letter", "admin"} <= kinds
        assert cluster.reach.agents()[0]["breaker"] == "open"
        sub.close()
    finally:
        await cluster.close()


# ---------------------------------------------------------------- W3C traceparent


def test_traceparent_parsing_and_the_child_header() -> None:
    from reach.core.traces import child_traceparent, trace_id_of

    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of(f"00-{tid}-00f067aa0ba902b7-01") == tid
    for bad in (None, "", "00-abc-def-01", f"ff-{tid}-00f067aa0ba902b7-01",
                f"00-{'0' * 32}-00f067aa0ba902b7-01"):
        assert trace_id_of(bad) is None
    task = "a" * 32
    assert child_traceparent(tid, task, None) == f"00-{tid}-{'a' * 16}-01"
    assert child_traceparent(tid, task, f"00-{tid}-00f067aa0ba902b7-00") == \
        f"00-{tid}-{'a' * 16}-00"  # the caller's sampling decision is kept
    assert child_traceparent("my-trace", task, "x") == "x"  # not W3C-shaped: as given


async def test_a_callers_traceparent_names_the_trace_and_agents_get_their_own() -> None:
    cluster = await Cluster.start()
    try:
        seen: list[Context] = []

        async def outer(ctx: Context) -> Any:
            seen.append(ctx)
            return await ctx.call("x.inner", {})

        async def inner(ctx: Context) -> str:
            seen.append(ctx)
            return "ok"

        await cluster.add_agent("one", {"x.outer": outer, "x.inner": inner})
        client = await cluster.client()
        tid = "4bf92f3577b34da6a3ce929d0e0e4736"
        handle = await client.submit("x.outer", {},
                                     traceparent=f"00-{tid}-00f067aa0ba902b7-01")
        assert await handle.result(timeout=5) == "ok"
        assert handle.trace_id == tid
        outer_ctx, inner_ctx = seen
        assert outer_ctx.traceparent == f"00-{tid}-{handle.task_id[:16]}-01"
        assert inner_ctx.trace_id == tid
        assert inner_ctx.traceparent == f"00-{tid}-{inner_ctx.task_id[:16]}-01"
        assert inner_ctx.parent_task_id == handle.task_id
    finally:
        await cluster.close()
