"""`TelemetrySink` keeps span and metric work off the request: queue now, process later."""

from __future__ import annotations

import asyncio

from router.telemetry.settings import TelemetrySettings
from tests.telemetry.helpers import in_memory_telemetry, streamed_with_retry


async def test_record_on_a_running_loop_only_queues_and_flushes_are_spaced() -> None:
    """Inside the event loop, `record` defers the work to a later loop callback: on a quiet
    service the next one (the same wake-up), then at most one flush per `flush_delay_s` while
    outcomes keep coming, so a busy service batches them."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(flush_delay_s=3600))
    telemetry.sink.record(streamed_with_retry()[0])
    assert len(exporter.get_finished_spans()) == 0  # nothing done inline
    await asyncio.sleep(0)
    assert len(exporter.get_finished_spans()) == 8  # flushed as soon as the loop was free
    telemetry.sink.record(streamed_with_retry()[0])  # within flush_delay_s of that flush
    await asyncio.sleep(0.01)
    queued = len(exporter.get_finished_spans())
    processed = telemetry.sink.flush()
    assert (queued, processed) == (8, 1)  # it waited for the delay
    assert len(exporter.get_finished_spans()) == 16


async def test_full_queue_drops_and_counts_instead_of_growing() -> None:
    """Past `queue_max` queued outcomes, new ones are dropped and counted."""
    telemetry, _ = in_memory_telemetry(TelemetrySettings(queue_max=2, flush_delay_s=3600))
    sink = telemetry.sink
    for _ in range(5):
        sink.record(streamed_with_retry()[0])
    assert (sink.dropped, sink.flush()) == (3, 2)
    assert "slorouter_telemetry_dropped_total 3.0" in telemetry.prometheus_text().decode()


def test_outcome_without_trace_still_gets_a_root_span_tree() -> None:
    """Before the handler starts traces, outcomes still produce a (new root) span tree."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    outcome.trace = None
    telemetry.sink.record(outcome)
    telemetry.sink.flush()
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [s.name for s in roots] == ["chat auto"]
