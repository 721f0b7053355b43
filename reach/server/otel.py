"""OpenTelemetry export, switched on by ``Settings.otel_endpoint`` (``agent-reach[otel]``).

Off by default, and then nothing of OpenTelemetry is imported and no call pays for it. On,
each finished task becomes a span with one child span per attempt (reach.core.spans), in the
task's W3C trace and under the caller's span, sent over OTLP/HTTP by the SDK's batch
processor from its own thread (reach.server.otel_sdk). This module only checks the setting
and loads the SDK part, with a clear error naming the extra when it is not installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from reach.core.tasks import Task
from reach.gateway.events import EventBus

if TYPE_CHECKING:
    from reach.server.otel_sdk import SpanExport

INSTALL_HINT = "pip install 'agent-reach[otel]'"
TRACES_PATH = "/v1/traces"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for ``endpoint``: a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
    is (``http://collector:4318``), gets ``/v1/traces``; one already ending so is kept."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def span_export(events: EventBus, find: Callable[[str], Task | None], endpoint: str,
                service_name: str, node_id: str) -> SpanExport:
    """The exporter for one coordinator (not started: ``await export.start()``).
    Raises ImportError naming the extra when the SDK is not installed."""
    try:
        from reach.server.otel_sdk import SpanExport
    except ImportError as exc:
        if not (exc.name or "").startswith(("opentelemetry", "google")):
            raise
        raise ImportError(f"otel_endpoint is set but the OpenTelemetry SDK is not installed "
                          f"({exc.name} is missing): {INSTALL_HINT}") from exc
    return SpanExport(events, find, traces_url(endpoint), service_name, node_id)
