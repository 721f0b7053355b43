"""OpenTelemetry export (docs/otel.md): a finished task reaches a real OTLP/HTTP receiver as a
span per task and per attempt, in the caller's trace and under the caller's span.

The receiver is an aiohttp server on loopback that decodes each POST /v1/traces body as the
collector would (``ExportTraceServiceRequest``); the coordinator is stopped to flush, so no
test waits on the batch processor's schedule.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from reach import TaskError, TaskFailed
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER_SPAN}-01"
FAST = Backoff(base=0.005, factor=2.0, cap=0.02, jitter=0.0)


@dataclass
class Receiver:
    """What the OTLP receiver got: every span, with its resource's attributes."""

    url: str
    spans: list[Span] = field(default_factory=list)
    agent_headers: list[dict[str, str]] = field(default_factory=list)  # POSTs to /work
    resources: list[dict[str, Any]] = field(default_factory=list)
    posts: int = 0

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def attrs(item: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in item.attributes}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver("")

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(body)
        got.posts += 1
        for rs in export.resource_spans:
            got.resources.append(attrs(rs.resource))
            for ss in rs.scope_spans:
                got.spans.extend(ss.spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def work(request: web.Request) -> web.Response:  # an HTTP agent, on the same port
        got.agent_headers.append(dict(request.headers))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    app.router.add_post("/work", work)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    got.url = f"http://127.0.0.1:{port}"
    try:
        yield got
    finally:
        await runner.cleanup()


async def test_a_task_is_a_span_in_the_callers_trace_with_its_attempt(
        receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url, otel_service_name="orders-reach")
    try:
        async def lookup(sku: str) -> int:
            return 7

        await cluster.add_agent("inventory", {"stock.query": lookup}, idempotent=True)
        client = await cluster.client("planner")
        handle = await client.submit("stock.query", {"sku": "a-1"}, traceparent=TRACEPARENT)
        assert await handle.result(5) == 7
    finally:
        await cluster.close()  # stopping the coordinator flushes its spans

    assert receiver.posts >= 1
    assert receiver.resources[0]["service.name"] == "orders-reach"
    [task] = receiver.named("stock.query")
    assert task.trace_id.hex() == TRACE  # the caller's trace
    assert task.parent_span_id.hex() == CALLER_SPAN  # under the caller's span
    # The task's span id is the parent agents were handed in their traceparent.
    assert task.span_id.hex() == handle.task_id[:16]
    assert task.kind == Span.SPAN_KIND_SERVER
    a = attrs(task)
    assert a["reach.task_id"] == handle.task_id and a["reach.capability"] == "stock.query"
    assert a["reach.caller"] == "planner" and a["reach.agent"] == "inventory"
    assert a["reach.state"] == "succeeded" and a["reach.attempts"] == 1
    assert "params" not in str(a) and "a-1" not in str(a)  # params never leave
    assert task.status.code != Status.STATUS_CODE_ERROR
    [attempt] = receiver.named("stock.query attempt")
    assert attempt.trace_id.hex() == TRACE and attempt.parent_span_id == task.span_id
    assert attempt.kind == Span.SPAN_KIND_CLIENT
    b = attrs(attempt)
    assert (b["reach.attempt"], b["reach.agent"], b["reach.outcome"]) == (1, "inventory", "ok")
    # Times are the task's own: the attempt sits inside the task.
    assert task.start_time_unix_nano <= attempt.start_time_unix_nano
    assert attempt.end_time_unix_nano <= task.end_time_unix_nano
    assert task.end_time_unix_nano > task.start_time_unix_nano


async def test_an_http_agent_gets_the_task_span_as_its_parent(receiver: Receiver) -> None:
    """Adapters propagate the context: the traceparent an HttpAgent's service receives names
    the caller's trace and, as parent, the exported task span, so the service's own spans
    hang under it."""
    from reach.adapters.http import HttpAgent

    cluster = await Cluster.start(otel_endpoint=receiver.url)
    try:
        await cluster.reach.attach(HttpAgent("legacy", receiver.url, {
            "orders.write": {"path": "/work", "latency_ms": 500}}))
        client = await cluster.client()
        assert await client.call("orders.write", {"n": 1}, traceparent=TRACEPARENT) == {
            "ok": True}
    finally:
        await cluster.close()

    [task] = receiver.named("orders.write")
    [headers] = receiver.agent_headers
    version, trace_id, parent, flags = headers["traceparent"].split("-")
    assert (trace_id, parent, flags) == (TRACE, task.span_id.hex(), "01")
    assert task.parent_span_id.hex() == CALLER_SPAN
    [attempt] = receiver.named("orders.write attempt")
    assert attrs(attempt)["reach.agent"] == "legacy"


async def test_a_retried_call_shows_two_attempts_and_the_retry(receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url, backoff=FAST)
    runs = 0
    try:
        async def flaky(sku: str) -> int:
            nonlocal runs
            runs += 1
            if runs == 1:
                raise RuntimeError("pool exhausted")
            return 7

        await cluster.add_agent("inventory", {"stock.query": flaky}, idempotent=True)
        client = await cluster.client()
        assert await client.call("stock.query", {"sku": "a"}, traceparent=TRACEPARENT) == 7
    finally:
        await cluster.close()

    [task] = receiver.named("stock.query")
    assert attrs(task)["reach.attempts"] == 2 and attrs(task)["reach.state"] == "succeeded"
    attempts = sorted(receiver.named("stock.query attempt"),
                      key=lambda s: attrs(s)["reach.attempt"])
    assert [attrs(s)["reach.outcome"] for s in attempts] == ["fault", "ok"]
    assert all(s.parent_span_id == task.span_id for s in attempts)
    assert attempts[0].status.code == Status.STATUS_CODE_ERROR
    assert "pool exhausted" in attempts[0].status.message
    assert attempts[0].end_time_unix_nano <= attempts[1].start_time_unix_nano
    [retry] = [e for e in task.events if e.name == "retry"]
    assert "pool exhausted" in attrs(retry)["reach.reason"]
    assert attempts[0].end_time_unix_nano <= retry.time_unix_nano \
        <= attempts[1].start_time_unix_nano


async def test_a_failed_task_is_an_error_span(receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url)
    try:
        async def lookup(sku: str) -> int:
            raise TaskError(f"unknown sku {sku}")

        await cluster.add_agent("inventory", {"stock.query": lookup})
        client = await cluster.client()
        with pytest.raises(TaskFailed):
            await client.call("stock.query", {"sku": "x"}, traceparent=TRACEPARENT)
    finally:
        await cluster.close()

    [task] = receiver.named("stock.query")
    assert task.status.code == Status.STATUS_CODE_ERROR
    assert attrs(task)["reach.state"] == "failed"
    assert attrs(task)["reach.error.code"] == "task_failed"
    [attempt] = receiver.named("stock.query attempt")
    assert attrs(attempt)["reach.outcome"] == "answer"


async def test_without_a_traceparent_the_span_is_a_root_in_the_tasks_own_trace(
        receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url)
    try:
        async def lookup(sku: str) -> int:
            return 1

        await cluster.add_agent("inventory", {"stock.query": lookup})
        client = await cluster.client()
        handle = await client.submit("stock.query", {"sku": "x"})
        await handle.result(5)
    finally:
        await cluster.close()

    [task] = receiver.named("stock.query")
    assert task.trace_id.hex() == handle.trace_id  # the trace reach.trace() shows
    assert task.parent_span_id == b""


async def test_an_unsampled_caller_is_not_exported(receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url)
    try:
        async def lookup(sku: str) -> int:
            return 1

        await cluster.add_agent("inventory", {"stock.query": lookup})
        client = await cluster.client()
        await client.call("stock.query", {"sku": "x"}, traceparent=f"00-{TRACE}-{CALLER_SPAN}-00")
        await client.call("stock.query", {"sku": "y"})
    finally:
        await cluster.close()

    assert len(receiver.named("stock.query")) == 1  # only the sampled (default) one
    assert receiver.named("stock.query")[0].trace_id.hex() != TRACE


async def test_two_coordinators_export_apart(receiver: Receiver) -> None:
    """A TracerProvider per coordinator: nothing global is set, each names its service."""
    from opentelemetry import trace

    one = await Cluster.start(otel_endpoint=receiver.url, otel_service_name="one")
    two = await Cluster.start(otel_service_name="two")  # no export
    try:
        async def lookup(sku: str) -> int:
            return 1

        await one.add_agent("a", {"x.get": lookup})
        await two.add_agent("b", {"y.get": lookup})
        await (await one.client()).call("x.get", {"sku": "1"})
        await (await two.client()).call("y.get", {"sku": "1"})
    finally:
        await one.close()
        await two.close()
    assert sorted(s.name for s in receiver.spans) == ["x.get", "x.get attempt"]
    assert {r["service.name"] for r in receiver.resources} == {"one"}
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"  # never set


async def test_a_start_that_fails_leaves_no_exporter_and_a_stray_event_no_span(
        receiver: Receiver, tmp_path: Any) -> None:
    import threading

    from reach import Reach

    before = set(threading.enumerate())
    with pytest.raises(OSError):  # the audit log cannot be opened: fails before the exporter
        await Reach.start(otel_endpoint=receiver.url, audit_log=str(tmp_path / "no" / "a.log"))
    assert [t.name for t in set(threading.enumerate()) - before
            if not t.name.startswith("asyncio_")] == []  # the batch processor's is not made
    async with Reach.start(otel_endpoint=receiver.url) as reach:
        reach.events.publish("task", {"task_id": "f" * 32, "state": "succeeded"})  # unknown
    assert receiver.spans == []


async def test_a_replayed_dead_letter_is_a_second_span_in_the_same_trace(
        receiver: Receiver) -> None:
    cluster = await Cluster.start(otel_endpoint=receiver.url)
    fixed = False
    try:
        async def write(order: str) -> str:
            if not fixed:
                raise RuntimeError("bad SQL deploy")
            return "written"

        await cluster.add_agent("orders", {"order.write": write}, scope="write")
        client = await cluster.client()
        handle = await client.submit("order.write", {"order": "o-1"}, traceparent=TRACEPARENT)
        with pytest.raises(TaskFailed):
            await handle.result(5)
        fixed = True
        await cluster.reach.replay(handle.task_id)
        await wait_until(lambda: not cluster.reach.dead_letters())  # left once it succeeded
        # a caller-chosen trace id that is not W3C-shaped: a fresh trace, the id kept
        await client.call("order.write", {"order": "o-2"}, trace_id="my-own-trace")
    finally:
        await cluster.close()

    dead, replayed, own = sorted(receiver.named("order.write"),
                                 key=lambda s: s.start_time_unix_nano)
    assert attrs(dead)["reach.state"] == "dead" and dead.status.code == Status.STATUS_CODE_ERROR
    assert dead.span_id.hex() == handle.task_id[:16]
    assert attrs(replayed)["reach.state"] == "succeeded" and attrs(replayed)["reach.replayed"]
    assert replayed.span_id != dead.span_id and replayed.trace_id == dead.trace_id
    assert replayed.parent_span_id.hex() == CALLER_SPAN
    assert [e.name for e in replayed.events] == ["replayed"]
    assert replayed.start_time_unix_nano >= dead.end_time_unix_nano
    assert attrs(own)["reach.trace_id"] == "my-own-trace" and own.parent_span_id == b""


def test_an_import_error_of_reach_itself_is_not_blamed_on_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.gateway.events import EventBus
    from reach.server import otel
    from reach.testing import ManualClock

    monkeypatch.setitem(sys.modules, "reach.server.otel_sdk", None)
    with pytest.raises(ImportError) as err:
        otel.span_export(EventBus(ManualClock()), lambda _id: None, "http://127.0.0.1:1", "r",
                         "n")
    assert "agent-reach[otel]" not in str(err.value)


def test_an_endpoint_that_is_not_http_is_refused_by_name() -> None:
    from reach.config import Settings
    with pytest.raises(ValueError, match="otel_endpoint 'collector:4317'"):
        Settings(otel_endpoint="collector:4317")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)


def test_off_imports_nothing_and_on_without_the_sdk_names_the_extra() -> None:
    done = _run("import asyncio, sys\n"
                "from reach import Reach\n"
                "async def main():\n"
                "    async with Reach.start():\n"
                "        pass\n"
                "asyncio.run(main())\n"
                "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
                "sys.modules['opentelemetry'] = None  # as if not installed\n"
                "try:\n"
                "    Reach.start(otel_endpoint='http://127.0.0.1:4318')\n"
                "except ImportError as exc:\n"
                "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    off, missing = done.stdout.strip().splitlines()
    assert off == "[]"  # off: nothing of OpenTelemetry was imported
    assert "pip install 'agent-reach[otel]'" in missing


@pytest.fixture
def service_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """Set before ``spawn`` copies the environment for its processes."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", "team-reach")
    return "team-reach"


async def test_reach_serve_exports_with_otel_endpoint(receiver: Receiver, service_name: str,
                                                      spawn: Any) -> None:
    """``reach serve --otel-endpoint URL`` (service name from OTEL_SERVICE_NAME): a call's
    spans reach the receiver by the time Ctrl-C has drained the coordinator."""
    import asyncio
    import signal

    from reach import Agent, Client
    from tests.subprocs import free_port

    port = free_port()
    proc = spawn("serve", "-m", "reach.cli", "serve", "--port", port, "--no-http",
                 "--store", "sqlite://", "--heartbeat-interval", "0.05",
                 "--otel-endpoint", receiver.url)
    await proc.wait_for("listening on")
    url = f"ws://127.0.0.1:{port}"
    agent = Agent("inventory", reconnect_base=0.02)

    @agent.capability("stock.query")
    async def lookup(sku: str) -> int:
        return 3

    await agent.connect(url)
    try:
        async with Client.connect(url, caller="shell") as client:
            assert await client.call("stock.query", {"sku": "a"}, traceparent=TRACEPARENT) == 3
    finally:
        await agent.close(drain=0.5)
    proc.send(signal.SIGINT)
    assert await asyncio.to_thread(proc.popen.wait, 20) == 0, proc.output()
    [task] = receiver.named("stock.query")
    assert task.trace_id.hex() == TRACE and task.parent_span_id.hex() == CALLER_SPAN
    assert attrs(task)["reach.caller"] == "shell"
    assert receiver.resources[0]["service.name"] == service_name


async def test_a_collector_that_hangs_does_not_hold_the_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    """A receiver that accepts and never answers: ``stop`` gives up on the flush after
    FLUSH_TIMEOUT (2 s) with a warning, instead of the exporter's timeout and retries."""
    import asyncio
    import time

    from reach.server.otel_sdk import FLUSH_TIMEOUT

    held: list[asyncio.StreamWriter] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        cluster = await Cluster.start(otel_endpoint=f"http://127.0.0.1:{port}")
        try:
            async def lookup(sku: str) -> int:
                return 1

            await cluster.add_agent("inventory", {"stock.query": lookup})
            await (await cluster.client()).call("stock.query", {"sku": "x"})
        finally:
            started = time.monotonic()
            await cluster.close()
            took = time.monotonic() - started
        assert took < FLUSH_TIMEOUT + 1.5  # the exporter alone would wait 5 s and retry
        assert "spans not all sent" in caplog.text
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def test_reach_serve_without_the_extra_is_one_line_and_exit_2() -> None:
    done = _run("import sys\n"
                "sys.modules['opentelemetry'] = None  # as if not installed\n"
                "from reach.cli import main\n"
                "sys.exit(main(['serve', '--port', '0', '--no-http', '--store', 'sqlite://',\n"
                "               '--otel-endpoint', 'http://127.0.0.1:4318']))\n")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "reach: otel_endpoint is set but the OpenTelemetry SDK is not installed "
        "(opentelemetry is missing): pip install 'agent-reach[otel]'"]
