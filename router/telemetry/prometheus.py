"""`GET /metrics`: the registry's metrics rendered as Prometheus text exposition format.

Each scrape collects `MetricRegistry` snapshots and converts them to `prometheus_client` metric
families, which also write the text, so the output is valid by construction. Naming follows the
OTel→Prometheus rules: dots become underscores, a unit of `s` adds `_seconds`, counters end in
`_total`, `{annotation}` units add nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import Metric as PromMetric
from starlette.requests import Request
from starlette.responses import Response

from router.telemetry.aggregate import MetricRegistry, Point, Snapshot

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "USD": "usd"}


def prom_name(name: str, unit: str) -> str:
    base = _INVALID.sub("_", name)
    suffix = _UNITS.get(unit)
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _label_names(points: Sequence[Point]) -> list[str]:
    return sorted({key for point in points for key, _ in point.labels})


def _values(point: Point, keys: Sequence[str]) -> list[str]:
    labels = dict(point.labels)
    return [str(labels.get(key, "")) for key in keys]


def family(snapshot: Snapshot) -> PromMetric:
    name = prom_name(snapshot.name, snapshot.unit)
    keys = _label_names(snapshot.points)
    labels = [_INVALID.sub("_", k) for k in keys]
    doc = snapshot.description or snapshot.name
    if snapshot.kind == "histogram":
        hist = HistogramMetricFamily(name, doc, labels=labels)
        for point in snapshot.points:
            running, buckets = 0, []
            for bound, count in zip(snapshot.bounds, point.buckets, strict=False):
                running += count
                buckets.append((repr(bound), float(running)))
            buckets.append(("+Inf", float(point.count)))
            hist.add_metric(_values(point, keys), buckets, point.total)
        return hist
    made = (CounterMetricFamily(name, doc, labels=labels) if snapshot.kind == "counter"
            else GaugeMetricFamily(name, doc, labels=labels))
    for point in snapshot.points:
        made.add_metric(_values(point, keys), point.value)
    return made


class _Collector:
    def __init__(self, registry: MetricRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[PromMetric]:
        for snapshot in self._registry.collect():
            yield family(snapshot)


def render(registry: MetricRegistry) -> bytes:
    """Collect now and return Prometheus text exposition format 0.0.4."""
    target = CollectorRegistry(auto_describe=False)
    target.register(_Collector(registry))
    return generate_latest(target)


def metrics_endpoint(registry: MetricRegistry,
                     before: Callable[[], object] | None = None
                     ) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint for `GET /metrics`; `before` runs first (e.g. a telemetry flush)."""

    async def endpoint(_: Request) -> Response:
        if before is not None:
            before()
        return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

    return endpoint
