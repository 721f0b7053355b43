"""Finished tasks to OpenTelemetry spans through the SDK, exported over OTLP/HTTP.

Imported only when export is configured (reach.server.otel). Each coordinator has its own
``TracerProvider``, never the global one, so two coordinators in a process (or an application
with its own OpenTelemetry set-up) do not see each other's spans. A task's terminal event
(the event bus, as JSON logs get it) queues the task; its spans are built just after, in a
``call_soon`` callback, so the caller is answered first. The spans' times are those the task
recorded (reach.core.spans), not when they are built. The SDK's ``BatchSpanProcessor`` queues
ended spans and exports them from its own thread: nothing waits for the collector on the
event loop, and a collector that is down costs dropped spans (the SDK logs them), not calls.
``stop`` flushes what is queued from a daemon thread and waits for it at most
``FLUSH_TIMEOUT``: a collector that is down must not hold a stopping coordinator (Ctrl-C)
for the exporter's retries; what is not sent by then is dropped, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from reach._version import __version__
from reach.core.spans import SpanRecord, TaskSpans, task_spans
from reach.core.tasks import TERMINAL, Task
from reach.gateway.events import TASK, Event, EventBus

EXPORT_TIMEOUT = 5.0  # seconds one export may take, its retries included
FLUSH_TIMEOUT = 2.0  # seconds ``stop`` waits for the last spans to be sent
log = logging.getLogger("reach.otel")
_STATES = frozenset(s.value for s in TERMINAL)


class _Ids(IdGenerator):
    """Random ids, except for the next span or trace when one is set: a task span takes the
    id its agents were handed as their parent, and the task's own trace id."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.span: int | None = None
        self.trace: int | None = None

    def generate_span_id(self) -> int:
        given, self.span = self.span, None
        return self._random.generate_span_id() if given is None else given

    def generate_trace_id(self) -> int:
        given, self.trace = self.trace, None
        return self._random.generate_trace_id() if given is None else given

    def is_trace_id_random(self) -> bool:
        return False  # a caller's trace id is whatever it chose


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class SpanExport:
    """One coordinator's span export; see the module docstring."""

    def __init__(self, events: EventBus, find: Callable[[str], Task | None], url: str,
                 service_name: str, node_id: str,
                 exporter: SpanExporter | None = None) -> None:
        self.events = events
        self.find = find
        self.url = url
        self.service_name = service_name
        self.node_id = node_id
        self._exporter = exporter
        self._ids = _Ids()
        self._pending: list[Task] = []
        self._provider: TracerProvider | None = None
        self._unlisten: Callable[[], None] | None = None
        self._tracer: trace.Tracer | None = None

    async def start(self) -> None:
        """Make the provider (its batch processor starts a thread) and follow task events."""
        attributes = {"service.name": self.service_name, "service.version": __version__,
                      "service.instance.id": self.node_id}
        self._provider = TracerProvider(resource=Resource.create(attributes),
                                        id_generator=self._ids, sampler=ParentBased(ALWAYS_ON))
        exporter = self._exporter or OTLPSpanExporter(endpoint=self.url,
                                                      timeout=EXPORT_TIMEOUT)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("reach", __version__)
        self._unlisten = self.events.listen(self._on_event)

    async def stop(self) -> None:
        """Stop following events, build what is queued, and flush the spans to the collector
        (from a thread, so the loop runs on while it posts; see the module docstring)."""
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self._build()
        provider, self._provider = self._provider, None
        if provider is None:
            return
        loop = asyncio.get_running_loop()
        flushed: asyncio.Future[None] = loop.create_future()

        def done() -> None:
            with contextlib.suppress(asyncio.InvalidStateError):  # cancelled: given up on
                flushed.set_result(None)

        def shutdown() -> None:
            try:
                provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(done)

        # A daemon thread, not the loop's executor: asyncio.run waits for those at exit.
        threading.Thread(target=shutdown, name="reach-otel-flush", daemon=True).start()
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT):
                await flushed
        except TimeoutError:
            log.warning("spans not all sent to %s within %.0f s (is the collector up?); "
                        "the rest are dropped", self.url, FLUSH_TIMEOUT)

    # ------------------------------------------------------------ events to spans

    def _on_event(self, event: Event) -> None:
        data = event.data
        if event.kind != TASK or data.get("state") not in _STATES:
            return
        task = self.find(data["task_id"])
        if task is None:
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._build)
        self._pending.append(task)

    def _build(self) -> None:
        pending, self._pending = self._pending, []
        for task in pending:
            try:
                self.export(task_spans(task))
            except Exception:  # a bug here must cost spans, never the coordinator's stop
                log.exception("task %s: its spans were not exported", task.task_id)

    def export(self, spans: TaskSpans) -> None:
        """Hand one task's spans to the SDK (they are exported in the background)."""
        tracer = self._tracer
        if tracer is None or not spans.sampled:
            return
        context = Context()  # never the ambient one: an application's own spans stay apart
        if spans.trace_id is not None and spans.parent_span_id is not None:
            parent = SpanContext(int(spans.trace_id, 16), int(spans.parent_span_id, 16),
                                 is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        elif spans.trace_id is not None:
            self._ids.trace = int(spans.trace_id, 16)
        if spans.span_id is not None:
            self._ids.span = int(spans.span_id, 16)
        rec = spans.task
        try:
            span = tracer.start_span(rec.name, context, SpanKind.SERVER,
                                     attributes=rec.attributes, start_time=_ns(rec.start))
        finally:
            self._ids.span = self._ids.trace = None
        for event in rec.events:
            span.add_event(event.name, event.attributes, timestamp=_ns(event.at))
        _status(span, rec)
        inside = trace.set_span_in_context(span, Context())
        for attempt in spans.attempts:
            child = tracer.start_span(attempt.name, inside, SpanKind.CLIENT,
                                      attributes=attempt.attributes,
                                      start_time=_ns(attempt.start))
            _status(child, attempt)
            child.end(end_time=_ns(attempt.end))
        span.end(end_time=_ns(rec.end))


def _status(span: trace.Span, record: SpanRecord) -> None:
    if record.error is not None:
        span.set_status(Status(StatusCode.ERROR, record.error))
