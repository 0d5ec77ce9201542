"""`GET /metrics`: the registry's metrics rendered as Prometheus text exposition format.

Naming follows the OTel→Prometheus rules: dots become underscores, a unit of `s` adds
`_seconds`, counters end in `_total`, `{annotation}` units add nothing.

A scrape reads the gauges on the event loop, and copies the counters and histograms (under the
registry's lock) and writes the text (`text_of`) on a worker thread. The tests hold `text_of`
to prometheus_client's own writer, byte for byte (`tests/support/prometheus_reference.py`),
which the scrape used until it was found to take about 10 µs a line: a
router with 50 deployments wrote 5-10 MB in 0.6-1.1 s, on the event loop, which stood still for
as long at every scrape (the scale audit of 2026-12-07; `bench.metrics_scrape`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString
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


def text_of(snapshots: Sequence[Snapshot]) -> bytes:
    """The Prometheus text exposition format 0.0.4 of `snapshots`: what prometheus_client
    writes for them (the same lines, labels sorted, values as Go formats them), several times
    faster."""
    out = _Text()
    for snapshot in snapshots:
        name = prom_name(snapshot.name, snapshot.unit)
        kind = snapshot.kind
        if kind == "counter" and not name.endswith("_total"):
            name += "_total"
        doc = (snapshot.description or snapshot.name).replace("\\", r"\\").replace("\n", r"\n")
        out.add(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        # in the order of their names (`a.z` after `a_a`), as prometheus_client sorts them
        by_name = sorted((_INVALID.sub("_", key), key) for key in _label_names(snapshot.points))
        keys = [key for _, key in by_name]
        if kind == "histogram":
            before = sum(1 for label, _ in by_name if label < "le")
            _histogram_lines(out, name, snapshot, keys, _written(by_name), before)
            continue
        names = _written(by_name)
        for point in snapshot.points:
            labels = ",".join(_label_pairs(point, keys, names))
            out.add(f"{name}{{{labels}}} {_go(point.value)}\n" if labels
                    else f"{name} {_go(point.value)}\n")
    return out.bytes()


class _Text:
    """Lines, encoded a thousand at a time: joining and encoding 40 MB of text at once are two
    calls of 30 ms each that hold the interpreter, so the event loop with them."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._encoded: list[bytes] = []

    def add(self, line: str) -> None:
        self._lines.append(line)
        if len(self._lines) >= 1000:
            self._encoded.append("".join(self._lines).encode())
            self._lines.clear()

    def bytes(self) -> bytes:
        return b"".join((*self._encoded, "".join(self._lines).encode()))


def _written(by_name: Sequence[tuple[str, str]]) -> list[str]:
    """Label names as written: a leading digit, which no name may have, as `_`."""
    return [f"_{label[1:]}" if label[:1].isdigit() else label for label, _ in by_name]


def _histogram_lines(out: _Text, name: str, snapshot: Snapshot, keys: Sequence[str],
                     names: Sequence[str], before: int) -> None:
    """`before`: how many label names sort before `le`, which takes its place among them."""
    bounds = [*(repr(bound) for bound in snapshot.bounds), "+Inf"]
    for point in snapshot.points:
        pairs = _label_pairs(point, keys, names)
        head, tail = ",".join(pairs[:before]), ",".join(pairs[before:])
        head, tail = (head + "," if head else ""), ("," + tail if tail else "")
        running = 0
        for le, count in zip(bounds, (*point.buckets[:len(bounds) - 1], None), strict=True):
            running = point.count if count is None else running + count
            out.add(f'{name}_bucket{{{head}le="{le}"{tail}}} {_count(running)}\n')
        labels = ",".join(pairs)
        braces = f"{{{labels}}}" if labels else ""
        out.add(f"{name}_count{braces} {_count(point.count)}\n"
                f"{name}_sum{braces} {_go(point.total)}\n")


def _label_pairs(point: Point, keys: Sequence[str], names: Sequence[str]) -> list[str]:
    labels = dict(point.labels)
    return [f'{label}="{_escape(str(labels.get(key, "")))}"'
            for key, label in zip(keys, names, strict=True)]


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return value


def _count(value: int) -> str:
    """A count as Go writes its float: `3.0` (exponents from a million on: `_go`), without
    `floatToGoString`'s work for the bucket lines, most of the text."""
    return f"{value}.0" if 0 <= value < 1_000_000 else _go(float(value))


def _go(value: float) -> str:
    """A value as Go writes it: `+Inf`, `1e+06`, `3.0` (prometheus_client's own rule)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def metrics_endpoint(registry: MetricRegistry,
                     before: Callable[[], object] | None = None
                     ) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint for `GET /metrics`; `before` runs first (e.g. a telemetry flush).
    The gauges are read on the event loop (their callbacks read the service's state, which only
    the loop may), the counters and histograms (lock-guarded) and the text on a worker thread:
    copying 10,000 series on the loop held it 35 ms."""

    async def endpoint(_: Request) -> Response:
        if before is not None:
            before()
        gauges = registry.gauge_snapshots()
        text = await asyncio.to_thread(lambda: text_of(registry.collect(gauges=gauges)))
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return endpoint
