"""Log correlation: structured events carry the trace and span ids of the request served."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

from router.logs import JsonFormatter, event
from router.telemetry.context import current_trace, start_trace
from router.telemetry.redact import install
from tests.telemetry.helpers import CLIENT_TRACEPARENT


@contextlib.contextmanager
def _json_lines(name: str) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing the router's JSON lines into a string."""
    stream = io.StringIO()
    logger = logging.getLogger(name)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def test_events_logged_while_serving_carry_trace_and_span_ids() -> None:
    """Inside a request (current_trace set) events get trace_id/span_id; outside they do not."""
    with _json_lines("tests.telemetry.logs") as (logger, stream):
        logger.setLevel(logging.INFO)
        install(["sk-a-provider-key-123"], logger=logger)
        trace = start_trace(CLIENT_TRACEPARENT)
        token = current_trace.set(trace)
        try:
            event(logger, "upstream_retry", deployment="pt-fast",
                  detail="sk-a-provider-key-123")
        finally:
            current_trace.reset(token)
            event(logger, "idle")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (inside["trace_id"], inside["span_id"]) == (trace.trace_id_hex, trace.span_id_hex)
    assert inside["detail"] == "[REDACTED]" and inside["deployment"] == "pt-fast"
    assert "trace_id" not in outside


def test_a_recurring_failure_is_logged_once_per_interval_with_the_count_left_out() -> None:
    """`ThrottledEvent`: the first report logs, the next ones within the interval are counted,
    and the next line says how many were left out."""
    from router.logs import ThrottledEvent

    now = [0.0]
    with _json_lines("tests.telemetry.throttled") as (logger, stream):
        throttled = ThrottledEvent(logger, "store_down", interval_s=10.0, clock=lambda: now[0])
        for t in (0.0, 1.0, 2.0, 9.9, 10.5, 11.0):
            now[0] = t
            throttled.report(error="ConnectionError")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["event"], line["suppressed"], line["error"]) for line in lines] == [
        ("store_down", 0, "ConnectionError"), ("store_down", 3, "ConnectionError")]
