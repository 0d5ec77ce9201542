"""Metric export over OTLP (or to the console): registry snapshots as the SDK's `MetricsData`.

`to_metrics_data` converts snapshots (cumulative temporality, the Prometheus-compatible choice)
and `PeriodicExport` hands them to any `MetricExporter` (the SDK's `OTLPMetricExporter` or
`ConsoleMetricExporter`) every `interval_s` from a daemon thread, and once more at shutdown.
The gauges' callbacks read state only the event loop writes (the SLO tracker's rings and their
kept sums, breakers, admission pools), so once `bind(loop)` has named the loop they run there,
as a `/metrics` scrape's do; the thread copies and encodes the rest. They ran on the thread
until 2026-12-07: an SLO snapshot read beside the loop's counting could leave an event out of
the sums the tracker keeps (the re-audit of the tiered SLO windows).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping, Sequence

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
# The longest an export waits for the event loop to read the gauges (a loop that busy is
# exported without them this round).
GAUGE_WAIT_S = 5.0


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def start(self) -> PeriodicExport:
        self._thread.start()
        return self

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the gauges on `loop` (call from a coroutine running on it)."""
        self._loop, self._loop_thread = loop, threading.get_ident()

    def _gauges(self) -> Mapping[str, Snapshot] | None:
        """The gauges' snapshots, taken on the bound loop (directly when unbound, or when
        called on the loop's own thread, as at shutdown); none when the loop does not get to
        it within `GAUGE_WAIT_S`; None when the export is stopping meanwhile (the shutdown's
        own last export, on the loop, has them: a gauge-less one before it could make the
        shutdown skip it, the re-audit of 2026-12-07)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._loop_thread:
            return self._registry.gauge_snapshots()
        taken: concurrent.futures.Future[Mapping[str, Snapshot]] = concurrent.futures.Future()

        def read() -> None:
            if taken.set_running_or_notify_cancel():
                try:
                    taken.set_result(self._registry.gauge_snapshots())
                except BaseException as exc:
                    taken.set_exception(exc)
        try:
            loop.call_soon_threadsafe(read)
        except RuntimeError:  # the loop is closed
            return {}
        waited = 0.0
        while waited < GAUGE_WAIT_S:
            if self._stop.is_set():
                taken.cancel()
                return None
            try:
                return taken.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                waited += 0.1
        taken.cancel()
        return {}

    def export_once(self) -> None:
        gauges = self._gauges()
        if gauges is None:  # stopping: the shutdown exports
            return
        snapshots = [s for s in self._registry.collect(gauges=gauges) if s.points]
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
