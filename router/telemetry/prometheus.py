"""`GET /metrics`: the OpenTelemetry metrics rendered as Prometheus text exposition format.

A pull `MetricReader` (the SDK's `InMemoryMetricReader`, cumulative) is collected on each
scrape and converted to `prometheus_client` metric families, which also write the text, so the
output is valid by construction. Naming follows the OTel→Prometheus rules: dots become
underscores, a unit of `s` adds `_seconds`, counters end in `_total`, `{annotations}` add nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Sequence

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    Sum,
)
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import (
    Metric as PromMetric,
)
from starlette.requests import Request
from starlette.responses import Response

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "USD": "usd"}


def prom_name(name: str, unit: str) -> str:
    base = _INVALID.sub("_", name)
    suffix = _UNITS.get(unit)
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _label_names(points: Sequence[object]) -> list[str]:
    names: set[str] = set()
    for point in points:
        names.update(getattr(point, "attributes", None) or {})
    return sorted(names)


def _values(point: object, keys: Sequence[str]) -> list[str]:
    attrs = getattr(point, "attributes", None) or {}
    return [str(attrs.get(key, "")) for key in keys]


def _family(metric: Metric) -> PromMetric | None:
    data = metric.data
    name = prom_name(metric.name, metric.unit or "")
    keys = _label_names(data.data_points)
    labels = [_INVALID.sub("_", k) for k in keys]
    doc = metric.description or metric.name
    if isinstance(data, Histogram):
        hist = HistogramMetricFamily(name, doc, labels=labels)
        for point in data.data_points:
            running, buckets = 0, []
            for bound, count in zip(point.explicit_bounds, point.bucket_counts, strict=False):
                running += count
                buckets.append((_le(bound), float(running)))
            buckets.append(("+Inf", float(point.count)))
            hist.add_metric(_values(point, keys), buckets, point.sum)
        return hist
    if isinstance(data, Sum) and data.is_monotonic:
        counter = CounterMetricFamily(name, doc, labels=labels)
        for sum_point in data.data_points:
            counter.add_metric(_values(sum_point, keys), float(sum_point.value))
        return counter
    if isinstance(data, Sum | Gauge):
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        for gauge_point in data.data_points:
            gauge.add_metric(_values(gauge_point, keys), float(gauge_point.value))
        return gauge
    return None


def _le(bound: float) -> str:
    return repr(float(bound))


class _Collector:
    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[PromMetric]:
        data: MetricsData | None = self._reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    family = _family(metric)
                    if family is not None:
                        yield family


def render(reader: InMemoryMetricReader) -> bytes:
    """Collect `reader` now and return Prometheus text exposition format 0.0.4."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(reader))
    return generate_latest(registry)


def metrics_endpoint(reader: InMemoryMetricReader) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint for `GET /metrics`."""

    async def endpoint(_: Request) -> Response:
        return Response(render(reader), media_type=CONTENT_TYPE_LATEST)

    return endpoint
