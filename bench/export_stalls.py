"""How late the event loop runs while the span exporter's thread encodes batches, by batch size.

    python -m bench.export_stalls [--spans-per-s 640] [--seconds 8] [--batches 512,64]

`BatchSpanProcessor` encodes spans to OTLP protobuf on its own thread, in Python, holding the
interpreter; the event loop's thread gets it back only when the encoder lets go or at the next
switch interval (5 ms). This benchmark builds the spans of real outcomes (a streamed request
with one retry, as `bench.suite telemetry-cost`), starts a thread that encodes them in batches
of each size at the same span rate (640 a second: 800 req/s, 10% sampled, 8 spans each), and
beside it an asyncio loop that sleeps 1 ms over and over, recording how late each wake-up
comes. Batch sizes alternate (each measured twice) so that a slow minute of the machine does not
fall on one. `router.telemetry.setup.SPAN_EXPORT_BATCH` is the size the service ships.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from router.telemetry.settings import TelemetrySettings
from router.telemetry.setup import SPAN_EXPORT_BATCH, build_telemetry

SDK_DEFAULT_BATCH = 512
TICK_S = 0.001


def real_spans(count: int) -> list[ReadableSpan]:
    """At least `count` finished spans of streamed requests with a retry, every one sampled."""
    from tests.telemetry.helpers import DEPLOYMENTS, streamed_with_retry

    exporter = InMemorySpanExporter()
    telemetry = build_telemetry(TelemetrySettings(sample_ratio=1.0), DEPLOYMENTS,
                                span_processor=SimpleSpanProcessor(exporter))
    spans: list[ReadableSpan] = []
    while len(spans) < count:
        outcome = streamed_with_retry()[0]
        outcome.trace = None
        telemetry.sink.record(outcome)
        telemetry.sink.flush()
        spans = list(exporter.get_finished_spans())
    return spans


def encode_at_rate(spans: Sequence[ReadableSpan], batch: int, spans_per_s: float,
                   stop: threading.Event) -> None:
    """Encode `batch` spans every `batch / spans_per_s` seconds until `stop` (the exporter)."""
    period = batch / spans_per_s
    chunk = list(spans[:batch])
    while not stop.is_set():
        began = time.perf_counter()
        encode_spans(chunk).SerializeToString()
        stop.wait(max(0.0, period - (time.perf_counter() - began)))


async def lateness_ms(seconds: float) -> list[float]:
    """How late each 1 ms sleep of this loop woke, for `seconds`."""
    late: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        began = time.perf_counter()
        await asyncio.sleep(TICK_S)
        late.append((time.perf_counter() - began - TICK_S) * 1e3)
    return late


def measure(spans: Sequence[ReadableSpan], batch: int, spans_per_s: float,
            seconds: float) -> list[float]:
    stop = threading.Event()
    encoder = threading.Thread(target=encode_at_rate, args=(spans, batch, spans_per_s, stop),
                               name="span-encoder", daemon=True)
    encoder.start()
    try:
        return asyncio.run(lateness_ms(seconds))
    finally:
        stop.set()
        encoder.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--spans-per-s", type=float, default=640.0)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                        default=[SDK_DEFAULT_BATCH, SPAN_EXPORT_BATCH],
                        help="batch sizes, comma-separated (default: %(default)s)")
    args = parser.parse_args()
    spans = real_spans(max(args.batches))
    print(f"{len(spans)} spans of streamed requests with a retry; encoding {args.spans_per_s:g} "
          f"spans/s; the loop sleeps {TICK_S * 1e3:g} ms at a time; shipped batch "
          f"{SPAN_EXPORT_BATCH}")
    results: dict[int, list[list[float]]] = {b: [] for b in args.batches}
    for _ in range(2):
        for batch in args.batches:
            results[batch].append(measure(spans, batch, args.spans_per_s, args.seconds))
    print(f"{'batch':>6}{'p50 ms':>9}{'p99':>8}{'p99.9':>8}{'max':>8}   (loop wake-up lateness)")
    for batch, runs in results.items():
        for late in runs:
            q = statistics.quantiles(late, n=1000, method="inclusive")
            print(f"{batch:>6}{statistics.median(late):>9.2f}{q[989]:>8.2f}{q[998]:>8.2f}"
                  f"{max(late):>8.2f}")


if __name__ == "__main__":
    main()
