"""Assemble telemetry from `TelemetrySettings`: span processor, metric registry, exporters.

The one place that chooses exporters (otlp | console | none) and builds the parts the app
mounts: `Telemetry.sink` (an `OutcomeSink`), `Telemetry.metrics_endpoint` (for `GET /metrics`),
`Telemetry.metrics.register_gauge` (for other parts' state), `Telemetry.start_trace` (at
arrival) and `Telemetry.shutdown()` (at exit: flushes spans and a last metric export).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from starlette.requests import Request
from starlette.responses import Response

from router.telemetry.aggregate import MetricRegistry
from router.telemetry.attributes import DeploymentInfo
from router.telemetry.context import TraceContext, start_trace
from router.telemetry.metrics import RouterMetrics
from router.telemetry.otlp import PeriodicExport
from router.telemetry.prometheus import metrics_endpoint, text_of
from router.telemetry.redact import Scrubber
from router.telemetry.settings import TelemetrySettings
from router.telemetry.sink import TelemetrySink
from router.telemetry.spans import EpochAnchor, SpanBuilder


@dataclass
class Telemetry:
    settings: TelemetrySettings
    sink: TelemetrySink
    metrics: RouterMetrics
    span_processor: SpanProcessor | None
    metric_export: PeriodicExport | None

    def start_trace(self, traceparent: str | None, tracestate: str | None = None) -> TraceContext:
        """Call at arrival: continue the client's trace or start one (sampled per settings)."""
        return start_trace(traceparent, tracestate, self.settings.sample_ratio,
                           exported=self.span_processor is not None)

    @property
    def metrics_endpoint(self) -> Callable[[Request], Awaitable[Response]] | None:
        """`GET /metrics` (None when `prometheus` is off); it flushes queued outcomes first."""
        if not self.settings.prometheus:
            return None
        return metrics_endpoint(self.metrics.registry, before=self.sink.flush)

    def prometheus_text(self) -> bytes:
        self.sink.flush()
        return text_of(self.metrics.registry.collect())

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop whose state the gauges read: OTLP exports read them there."""
        if self.metric_export is not None:
            self.metric_export.bind(loop)

    def shutdown(self) -> None:
        self.sink.flush()
        if self.span_processor is not None:
            self.span_processor.shutdown()
        if self.metric_export is not None:
            self.metric_export.shutdown()


# How long one OTLP export may take, its retries included (the exporters' default is 10 s).
# Telemetry is best effort: a batch a collector cannot take in this long is dropped, and a
# collector that is down delays shutdown by at most this much per signal, not ~20 s.
OTLP_TIMEOUT_S = 3.0
# Spans sent to the exporter at once. A batch is encoded (protobuf, in Python) on the exporter's
# thread, holding the interpreter about 30 µs a span: the SDK's default of 512 held it 12-17 ms,
# the event loop getting it back only every 5 ms (the switch interval), which showed as +5-7 ms
# of E2E p99 with telemetry on at 800 req/s. 64 spans hold it about 2 ms; the thread lets go
# between batches (each is an HTTP request).
SPAN_EXPORT_BATCH = 64


def _endpoint(settings: TelemetrySettings, signal: str) -> str:
    return settings.otlp_endpoint.rstrip("/") + f"/v1/{signal}"


def _span_exporter(settings: TelemetrySettings) -> SpanExporter | None:
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=_endpoint(settings, "traces"),
                                headers=settings.otlp_headers, timeout=OTLP_TIMEOUT_S)
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    return None


def _metric_exporter(settings: TelemetrySettings) -> MetricExporter | None:
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=_endpoint(settings, "metrics"),
                                  headers=settings.otlp_headers, timeout=OTLP_TIMEOUT_S)
    if settings.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    return None


def build_telemetry(settings: TelemetrySettings, deployments: Mapping[str, DeploymentInfo],
                    span_processor: SpanProcessor | None = None,
                    metric_exporter: MetricExporter | None = None,
                    secrets: Sequence[str] = ()) -> Telemetry:
    """Build telemetry; tests pass their own processor/exporter (e.g. in-memory ones).
    `secrets`: the configuration's keys, kept out of span attributes as out of the logs."""
    resource = Resource.create({"service.name": settings.service_name})
    metrics = RouterMetrics(MetricRegistry(), deployments)
    if span_processor is None and settings.traces_enabled:
        exporter = _span_exporter(settings)
        span_processor = (BatchSpanProcessor(exporter, max_export_batch_size=SPAN_EXPORT_BATCH)
                          if exporter is not None else None)
    spans = (SpanBuilder(span_processor, resource, deployments, EpochAnchor.now(),
                         captures_content=settings.captures_content, scrub=Scrubber(secrets))
             if span_processor is not None else None)
    chosen = metric_exporter if metric_exporter is not None else _metric_exporter(settings)
    export = (PeriodicExport(metrics.registry, chosen, resource,
                             settings.metrics_export_interval_s).start()
              if chosen is not None else None)
    sink = TelemetrySink(metrics, spans, settings.flush_delay_s, settings.queue_max,
                         settings.sample_ratio)
    return Telemetry(settings, sink, metrics, span_processor, export)
