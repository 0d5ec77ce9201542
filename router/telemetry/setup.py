"""Assemble telemetry from `TelemetrySettings`: span processors, meter provider, readers.

The one place that chooses exporters (otlp | console | none) and builds the parts the app
mounts: `Telemetry.sink` (an `OutcomeSink`), `Telemetry.metrics_endpoint` (for `GET /metrics`),
`Telemetry.metrics.register_gauge` (for other parts' state) and `Telemetry.shutdown()`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from starlette.requests import Request
from starlette.responses import Response

from router.telemetry.attributes import DeploymentInfo
from router.telemetry.context import TraceContext, start_trace
from router.telemetry.metrics import RouterMetrics
from router.telemetry.prometheus import metrics_endpoint, render
from router.telemetry.settings import TelemetrySettings
from router.telemetry.sink import TelemetrySink
from router.telemetry.spans import EpochAnchor, SpanBuilder


@dataclass
class Telemetry:
    settings: TelemetrySettings
    sink: TelemetrySink
    metrics: RouterMetrics
    meter_provider: MeterProvider
    prometheus_reader: InMemoryMetricReader | None
    span_processor: SpanProcessor | None

    def start_trace(self, traceparent: str | None, tracestate: str | None = None) -> TraceContext:
        """Call at arrival: continue the client's trace or start one (sampled per settings)."""
        return start_trace(traceparent, tracestate, self.settings.sample_ratio)

    @property
    def metrics_endpoint(self) -> Callable[[Request], Awaitable[Response]] | None:
        if self.prometheus_reader is None:
            return None
        return metrics_endpoint(self.prometheus_reader)

    def prometheus_text(self) -> bytes:
        self.sink.flush()
        return render(self.prometheus_reader) if self.prometheus_reader is not None else b""

    def shutdown(self) -> None:
        self.sink.flush()
        if self.span_processor is not None:
            self.span_processor.shutdown()
        self.meter_provider.shutdown()


def _span_exporter(settings: TelemetrySettings) -> SpanExporter | None:
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/traces",
                                headers=settings.otlp_headers)
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    return None


def _metric_readers(settings: TelemetrySettings) -> list[MetricReader]:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    interval_ms = settings.metrics_export_interval_s * 1e3
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/metrics",
            headers=settings.otlp_headers)
        return [PeriodicExportingMetricReader(exporter, export_interval_millis=interval_ms)]
    if settings.exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return [PeriodicExportingMetricReader(ConsoleMetricExporter(),
                                              export_interval_millis=interval_ms)]
    return []


def build_telemetry(settings: TelemetrySettings, deployments: Mapping[str, DeploymentInfo],
                    span_processor: SpanProcessor | None = None,
                    extra_readers: tuple[MetricReader, ...] = ()) -> Telemetry:
    """Build telemetry; tests pass their own `span_processor` (e.g. over an in-memory exporter)."""
    resource = Resource.create({"service.name": settings.service_name})
    prometheus = InMemoryMetricReader() if settings.prometheus else None
    readers = [*_metric_readers(settings), *extra_readers]
    if prometheus is not None:
        readers.append(prometheus)
    provider = MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)
    metrics = RouterMetrics(provider.get_meter("slorouter"), deployments)
    if span_processor is None and settings.traces_enabled:
        exporter = _span_exporter(settings)
        span_processor = BatchSpanProcessor(exporter) if exporter is not None else None
    spans = (SpanBuilder(span_processor, resource, deployments, EpochAnchor.now())
             if span_processor is not None else None)
    sink = TelemetrySink(metrics, spans, settings.flush_delay_s, settings.queue_max,
                         settings.sample_ratio)
    return Telemetry(settings, sink, metrics, provider, prometheus, span_processor)
