"""Log correlation: structured events carry the trace and span ids of the request served."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import threading
import warnings
from collections.abc import Iterator

from router.logs import JsonFormatter, configure, event
from router.outcomes import Outcome
from router.telemetry.context import TraceContext, current_request, start_trace
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
    propagated, logger.propagate = logger.propagate, False
    try:
        yield logger, stream
    finally:  # as it was: a logger left unpropagating hid later tests' lines from them
        logger.removeHandler(handler)
        logger.propagate = propagated


def test_events_logged_while_serving_carry_request_trace_and_span_ids() -> None:
    """Inside a request (`current_request` set) events get its request id and, when it has a
    trace, trace_id/span_id; outside they get none."""
    with _json_lines("tests.telemetry.logs") as (logger, stream):
        logger.setLevel(logging.INFO)
        install(["sk-a-provider-key-123"], logger=logger)
        trace = start_trace(CLIENT_TRACEPARENT)
        token = current_request.set(_served("req-traced", trace))
        try:
            event(logger, "upstream_retry", deployment="pt-fast",
                  detail="sk-a-provider-key-123")
        finally:
            current_request.reset(token)
            event(logger, "idle")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (inside["trace_id"], inside["span_id"]) == (trace.trace_id_hex, trace.span_id_hex)
    assert inside["request_id"] == "req-traced"
    assert inside["detail"] == "[REDACTED]" and inside["deployment"] == "pt-fast"
    assert "trace_id" not in outside and "request_id" not in outside


def test_a_library_line_logged_while_serving_carries_the_request_id_without_tracing() -> None:
    """Another library's plain log call (no event data of its own), telemetry off (no trace):
    the line still names the request, so an operator finds it from the `x-request-id` the
    client got. It used to carry nothing of the request."""
    with _json_lines("tests.telemetry.library") as (logger, stream):
        logger.setLevel(logging.INFO)
        install([], logger=logger)
        token = current_request.set(_served("req-untraced", None))
        try:
            logger.warning("connection pool is full, discarding connection: %s", "host")
        finally:
            current_request.reset(token)
    line = json.loads(stream.getvalue())
    assert line["request_id"] == "req-untraced" and "trace_id" not in line


def _served(request_id: str, trace: TraceContext | None) -> Outcome:
    return Outcome(request_id=request_id, tenant="t", requested_model="auto", stream=False,
                   arrived_at=0.0, trace=trace)


def test_the_access_line_splits_the_cost_by_attempt() -> None:
    """A request that fell back logs its total cost under the deployment that answered; each
    attempt's share is on its own entry, so chargeback by deployment can be built from the log
    (only the total was there: the cost audit of 2026-12-07)."""
    from router.execution.attempt import AttemptRecord
    from router.outcomes import LogSink, access_log

    cut = AttemptRecord("pa", 1, 0.0, outcome="failed", cost_usd=0.000028, cost_estimated=True)
    won = AttemptRecord("pb", 2, 1.0, kind="fallback", outcome="won", cost_usd=0.000696)
    outcome = _served("req-cost", None)
    outcome.deployment, outcome.attempts, outcome.cost_usd = "pb", [cut, won], 0.000696
    outcome.add_unanswered_costs()
    with _json_lines(access_log.name) as (logger, stream):
        logger.setLevel(logging.INFO)
        install([], logger=logger)
        LogSink().record(outcome)
    line = json.loads(stream.getvalue())
    assert line["cost_usd"] == 0.000724 and line["deployment"] == "pb"
    assert [(a["deployment"], a["cost_usd"], a["cost_estimated"]) for a in line["attempts"]] == [
        ("pa", 0.000028, True), ("pb", 0.000696, False)]


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


def test_the_access_line_shows_how_many_choices_were_asked_for() -> None:
    """The outcome's `n` reaches the `request_finished` line as a number: under the name
    `choices` the redaction withheld it as content on every line."""
    from router.outcomes import LogSink, access_log

    with _json_lines(access_log.name) as (logger, stream):
        logger.setLevel(logging.INFO)
        install(["sk-a-provider-key-123"], logger=logger)
        outcome = _served("req-n", None)
        outcome.choices = 3
        LogSink().record(outcome)
    line = json.loads(stream.getvalue())
    assert line["event"] == "request_finished" and line["n"] == 3
    assert "choices" not in line and "[content withheld]" not in stream.getvalue()


def test_an_exporters_line_per_failed_attempt_is_logged_once_per_interval() -> None:
    """An OTLP collector that is down made its exporter log two lines a second, each with
    another retry delay (421 lines in 8 minutes of a soak): `Throttle` lets one through per
    logger per interval, with how many it held back; other loggers pass untouched."""
    from router.logs import THROTTLED_LOGGERS, Throttle

    now = [0.0]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Throttle(THROTTLED_LOGGERS, interval_s=10.0, clock=lambda: now[0]))
    exporter = logging.getLogger("opentelemetry.exporter.otlp.common.http")
    other = logging.getLogger("tests.telemetry.untouched")
    propagated = [logger.propagate for logger in (exporter, other)]
    for logger in (exporter, other):
        logger.addHandler(handler)
        logger.propagate = False
    try:
        for t in (0.0, 0.5, 1.0, 9.0, 10.5):
            now[0] = t
            exporter.warning("Transient error %s encountered while exporting %s batch, "
                             "retrying in %.2fs.", "Unavailable", "span", t)
            other.warning("kept")
    finally:
        for logger, was in zip((exporter, other), propagated, strict=True):
            logger.removeHandler(handler)
            logger.propagate = was
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [line for line in lines if line["logger"].startswith("opentelemetry")]
    assert [line["suppressed"] for line in mine] == [0, 3]
    assert sum(line["event"] == "kept" for line in lines) == 5


def test_a_warning_is_logged_without_its_text_unless_the_text_is_the_interpreters_own() -> None:
    """A coroutine never awaited (litellm's, when a call is cancelled) is named; any other
    warning's text may quote data and stays out."""
    from router.logs import warning_event

    with _json_lines("py.warnings") as (_, stream):
        warning_event(RuntimeWarning("coroutine 'OpenAIChatCompletion.acompletion' was never "
                                     "awaited"), RuntimeWarning, "x.py", 1)
        warning_event(UserWarning("Expected `str` but got `int` with value `secret-answer`"),
                      UserWarning, "y.py", 2)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["message"] == ("coroutine 'OpenAIChatCompletion.acompletion' was never "
                                   "awaited")
    assert "message" not in lines[1] and "secret-answer" not in stream.getvalue()


def test_the_access_line_of_a_stream_broken_after_its_head_says_what_the_client_got() -> None:
    """A stream that broke after its 200 was sent is logged with the error it ended with
    (`status` 504) and, since 2026-12-06, the status the client got (`sent_status` 200), which
    the server span's `http.response.status_code` already said."""
    from router.outcomes import LogSink, access_log

    with _json_lines(access_log.name) as (logger, stream):
        logger.setLevel(logging.INFO)
        install(["sk-a-provider-key-123"], logger=logger)
        outcome = _served("req-broken", None)
        outcome.stream, outcome.first_content_at = True, outcome.arrived_at + 0.05
        outcome.status, outcome.error_code = 504, "deadline_exceeded"
        LogSink().record(outcome)
    line = json.loads(stream.getvalue())
    assert (line["status"], line["sent_status"], line["error_code"]) == (
        504, 200, "deadline_exceeded")


def test_a_recurring_failure_that_ends_is_logged_as_recovered_once() -> None:
    """A store that failed logs its recovery once (how long, how many failures), and nothing
    while it works; a failure after that starts a new spell."""
    from router.logs import ThrottledEvent

    now = [0.0]
    with _json_lines("slorouter.test.recovery") as (logger, stream):
        logger.setLevel(logging.INFO)
        throttled = ThrottledEvent(logger, "store_unavailable", clock=lambda: now[0],
                                   recovered_name="store_recovered")
        throttled.recovered()  # nothing failed: nothing to say
        for _ in range(3):
            throttled.report(error="ConnectionError")
            now[0] += 2.0
        throttled.recovered()
        throttled.recovered()
        throttled.report(error="ConnectionError")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == [
        "store_unavailable", "store_recovered", "store_unavailable"]
    assert (lines[1]["failures"], lines[1]["failing_s"]) == (3, 6.0)
    assert lines[2]["suppressed"] == 0  # a new spell is logged at once


def test_a_library_line_keeps_its_template_with_each_arguments_place_marked() -> None:
    """litellm's loggers lose their lines' arguments (they may quote a prompt or an answer):
    the line reads `model=[withheld]` where it read a bare `model=%s`, and no argument's text
    is in it, whatever its conversion (`%(name)r`, `%d`, `%.2f`; `%%` stays a percent sign)."""
    from router.telemetry.redact import without_arguments

    with _json_lines("test.library") as (logger, stream):
        logger.addFilter(without_arguments)
        try:
            logger.warning("Dropping unsupported `service_tier` for model=%s", "canary-model")
            logger.warning("%(who)r sent %d tokens, %.2f%% cached", {"who": "canary-user"})
            logger.warning("no arguments: 100%% as written")
        finally:
            logger.removeFilter(without_arguments)
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events == ["Dropping unsupported `service_tier` for model=[withheld]",
                      "[withheld] sent [withheld] tokens, [withheld]% cached",
                      "no arguments: 100%% as written"]
    assert "canary" not in stream.getvalue()


def test_the_openai_sdks_debug_lines_are_not_logged_at_debug() -> None:
    """The openai SDK (under litellm) logs an upstream's `x-request-id` header as is at debug,
    which an upstream may fill with anything (the telemetry audit of 2026-12-07): its loggers
    stay at warning when the service logs at debug, as litellm's and httpx's do."""
    root = logging.getLogger()
    touched = [logging.getLogger(name) for name in (
        "slorouter.access", "LiteLLM", "litellm", "httpx", "openai", "uvicorn.access")]
    saved = (root.handlers[:], root.level, [t.level for t in touched], warnings.showwarning,
             threading.excepthook)
    try:
        configure("debug")
        assert logging.getLogger("slorouter.x").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("openai._base_client").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("openai._base_client").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:], root.level, levels, warnings.showwarning, threading.excepthook = saved
        for logger, level in zip(touched, levels, strict=True):
            logger.setLevel(level)
