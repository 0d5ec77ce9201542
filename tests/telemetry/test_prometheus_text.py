"""`text_of`, the scrape's writer, writes what prometheus_client's own writer writes, byte for
byte, for any registry: names, escaping, empty and missing labels, large and special values.
(The scrape used `render`, about ten times slower, on the event loop: `bench.metrics_scrape`.)"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from router.telemetry.aggregate import MetricRegistry
from router.telemetry.prometheus import text_of
from tests.support.prometheus_reference import render

LABEL_VALUES = st.text(alphabet=st.sampled_from('ab\\"\n\u00e9 {}=,'), max_size=6)
LABELS = st.dictionaries(st.sampled_from(["gen_ai.request.model", "task", "le_x", "a", "z.z",
                                          "a.z", "a_a", "kz", "k-z", "k0", "0abc", "9"]),
                         LABEL_VALUES, max_size=3)
VALUES = st.one_of(st.floats(allow_nan=False, min_value=-1e12, max_value=1e12),
                   st.sampled_from([0.0, 1e6, 1234567.0, 2e7, 1e-9]))


@settings(max_examples=150, deadline=None)
@given(counters=st.lists(st.tuples(LABELS, st.floats(0, 1e9)), max_size=5),
       observations=st.lists(st.tuples(LABELS, st.floats(0, 1e8)), max_size=12),
       gauge_points=st.lists(st.tuples(st.one_of(VALUES, st.just(math.inf), st.just(math.nan)),
                                       LABELS), max_size=4),
       description=st.text(alphabet=st.sampled_from("ab \\\n"), max_size=8))
def test_text_of_writes_what_prometheus_client_writes(
        counters: list[tuple[dict[str, str], float]],
        observations: list[tuple[dict[str, str], float]],
        gauge_points: list[tuple[float, dict[str, str]]], description: str) -> None:
    registry = MetricRegistry()
    counter = registry.counter("slorouter.requests", "{request}", description)
    for labels, amount in counters:
        counter.add(amount, labels)
    already_total = registry.counter("slorouter.bytes_total", "By")
    already_total.add(3.0)
    histogram = registry.histogram("gen_ai.server.request.duration",
                                   (0.01, 0.1, 1.0, 4e6, 6.7e7), unit="s")
    for labels, value in observations:
        histogram.record(value, labels)
    registry.gauge("slorouter.breaker.state", lambda: gauge_points)
    def broken() -> list[tuple[float, dict[str, str]]]:
        raise ZeroDivisionError  # a failing callback: skipped by both

    registry.gauge("slorouter.broken", broken)
    registry.histogram("slorouter.unused", (1.0,))
    expected = render(registry)
    assert text_of(registry.collect()) == expected
    assert text_of(registry.collect(gauges=registry.gauge_snapshots())) == expected
