"""prometheus_client's own writer of a `MetricRegistry`: the reference the router's `/metrics`
writer (`router.telemetry.prometheus.text_of`) is held to, byte for byte, and the old scrape
`bench.metrics_scrape` sets beside it. The router served this until 2026-12-07, on the event
loop, at about 10 µs a line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import Metric as PromMetric

from router.telemetry.aggregate import MetricRegistry, Point, Snapshot
from router.telemetry.prometheus import _INVALID, _label_names, prom_name


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
