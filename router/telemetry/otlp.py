"""Metric export over OTLP (or to the console): registry snapshots as the SDK's `MetricsData`.

`to_metrics_data` converts snapshots (cumulative temporality, the Prometheus-compatible choice)
and `PeriodicExport` hands them to any `MetricExporter` (the SDK's `OTLPMetricExporter` or
`ConsoleMetricExporter`) every `interval_s` from a daemon thread, and once more at shutdown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from router.telemetry.aggregate import MetricRegistry, Snapshot

_CUMULATIVE = AggregationTemporality.CUMULATIVE
SCOPE = InstrumentationScope("slorouter", "0.1.0")


def _metric(snapshot: Snapshot, start_ns: int, now_ns: int) -> Metric:
    data: Histogram | Sum | Gauge
    if snapshot.kind == "histogram":
        data = Histogram([HistogramDataPoint(dict(p.labels), start_ns, now_ns, p.count, p.total,
                                             list(p.buckets), list(snapshot.bounds), p.low,
                                             p.high) for p in snapshot.points], _CUMULATIVE)
    else:
        points = [NumberDataPoint(dict(p.labels), start_ns, now_ns, p.value)
                  for p in snapshot.points]
        data = Sum(points, _CUMULATIVE, True) if snapshot.kind == "counter" else Gauge(points)
    return Metric(snapshot.name, snapshot.description, snapshot.unit, data)


def to_metrics_data(snapshots: Sequence[Snapshot], resource: Resource, start_ns: int,
                    now_ns: int) -> MetricsData:
    metrics = [_metric(s, start_ns, now_ns) for s in snapshots if s.points]
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], "")])


class PeriodicExport:
    """Exports the registry every `interval_s` on a daemon thread until `shutdown()`."""

    def __init__(self, registry: MetricRegistry, exporter: MetricExporter, resource: Resource,
                 interval_s: float, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._registry = registry
        self._exporter = exporter
        self._resource = resource
        self._interval = interval_s
        self._wall_ns = wall_ns
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slorouter-metrics-export",
                                        daemon=True)
        self._failing = False  # the last export failed: the collector is down, say

    def start(self) -> PeriodicExport:
        self._thread.start()
        return self

    def export_once(self) -> None:
        snapshots = [s for s in self._registry.collect() if s.points]
        if not snapshots:  # nothing recorded yet: no empty requests to the collector
            return
        result = self._exporter.export(to_metrics_data(
            snapshots, self._resource, self._registry.start_ns, self._wall_ns()))
        self._failing = result == MetricExportResult.FAILURE

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.export_once()
            except Exception:  # an unreachable collector must not kill the thread
                self._failing = True

    def shutdown(self) -> None:
        """A last export, unless the last one failed (a collector that is down would hold
        the process's exit for the exporter's whole timeout)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        try:
            if not self._failing and not self._thread.is_alive():
                self.export_once()
        finally:
            self._exporter.shutdown()
