"""`TelemetrySink` keeps span and metric work off the request: queue now, process later."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind

from router.logs import JsonFormatter
from router.telemetry import attributes as A
from router.telemetry.context import current_request, start_trace
from router.telemetry.redact import TraceLogFilter
from router.telemetry.settings import TelemetrySettings
from router.telemetry.setup import build_telemetry
from tests.telemetry.helpers import DEPLOYMENTS, in_memory_telemetry, streamed_with_retry


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


class _LoggingProcessor(SpanProcessor):
    """Logs a line for each server span it is handed, as the SDK's warnings do while spans are
    built, and breaks on `req-b`'s (an exporter that raises: `telemetry_record_failed`)."""

    def on_end(self, span: ReadableSpan) -> None:
        if span.kind != SpanKind.SERVER or span.attributes is None:
            return
        request_id = span.attributes[A.REQUEST_ID]
        logging.getLogger("tests.telemetry.sdk").warning("span of %s", request_id)
        if request_id == "req-b":
            raise RuntimeError("exporter broke")


async def test_lines_logged_while_an_outcome_is_processed_name_its_own_request() -> None:
    """Spans are built in a flush that runs in a context of its own, with `current_request`
    set to each outcome in turn: the flush ran in the context of the request that scheduled
    it, so every line logged for the others in its batch (an SDK's warning about request B's
    `tracestate`, B's `telemetry_record_failed`) carried that request's request and trace ids
    (the telemetry audit of 2026-12-07)."""
    telemetry = build_telemetry(TelemetrySettings(sample_ratio=1.0, flush_delay_s=3600),
                                DEPLOYMENTS, span_processor=_LoggingProcessor())
    traces = {}

    async def served(request_id: str) -> None:  # a request's task, its own context
        outcome, _ = streamed_with_retry()
        outcome.request_id, outcome.trace = request_id, start_trace(None, ratio=1.0)
        traces[request_id] = outcome.trace.trace_id_hex
        current_request.set(outcome)
        telemetry.sink.record(outcome)

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceLogFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        await asyncio.gather(served("req-a"), served("req-b"), served("req-c"))
        for _ in range(3):  # the flush the first record scheduled
            await asyncio.sleep(0)
        scraping, _ = streamed_with_retry()  # a flush inside another request (a scrape)
        scraping.request_id = "req-scrape"
        token = current_request.set(scraping)
        telemetry.sink.flush()
        assert current_request.get() is scraping  # given back as it was
        current_request.reset(token)
    finally:
        root.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    logged = {line["event"].removeprefix("span of "): line for line in lines
              if line["event"].startswith("span of ")}
    assert set(logged) == set(traces)
    for request_id, line in logged.items():
        assert (line["request_id"], line["trace_id"]) == (request_id, traces[request_id])
    failed = [line for line in lines if line["event"] == "telemetry_record_failed"]
    assert [line["request_id"] for line in failed] == ["req-b"]
