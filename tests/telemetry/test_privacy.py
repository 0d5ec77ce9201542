"""Privacy: prompt and completion text, and secrets, never reach spans, metrics or logs."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import json
import logging
import threading
from collections.abc import Iterator

import aiohttp
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.trace import SpanKind

from router.logs import JsonFormatter, thread_error_event
from router.telemetry.redact import RedactingFilter, TraceLogFilter
from tests.support.services import Running
from tests.telemetry.helpers import in_memory_telemetry
from tests.telemetry.served import API_KEY, CONFIG, serve

CANARY = "CANARY-7f3a9c-zebra-quartz"
PERSIAN_CANARY = "قناری-۷۳۹"


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every log record at DEBUG, as the router's JSON lines, through the guard filters."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceLogFilter())
    handler.addFilter(RedactingFilter([API_KEY]))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


async def _traffic(base: str) -> str:
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": f"secret system {CANARY}"},
        {"role": "user", "content": f"Repeat {CANARY} and {PERSIAN_CANARY} please"}]
    done = await client.chat.completions.create(model="auto", messages=messages)
    stream = await client.chat.completions.create(model="chain", messages=messages, stream=True)
    async for _ in stream:
        pass
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="auto", messages=messages,
                                             extra_body={"temperature": CANARY})
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        assert response.status == 200
        metrics = await response.text()
    await client.close()
    assert done.choices
    return metrics


async def test_canary_text_appears_in_no_span_metric_or_log_line(
        sim: Running, log_lines: io.StringIO) -> None:
    """Requests carrying a canary in every message leave no trace of it anywhere we emit."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(sim.base_url, telemetry) as base:
        metrics = await _traffic(base)
    telemetry.sink.flush()
    spans = [span.to_json() for span in exporter.get_finished_spans()]
    logs = log_lines.getvalue()
    assert len(spans) >= 6 and "gen_ai_server_request_duration_seconds_bucket" in metrics
    assert "request_finished" in logs
    for emitted in (*spans, metrics, logs, telemetry.prometheus_text().decode()):
        assert CANARY not in emitted
        assert PERSIAN_CANARY not in emitted
        assert API_KEY not in emitted


async def _fails(text: str) -> None:
    raise ValueError(f"could not read {text!r}")


async def test_the_served_loop_logs_an_uncaught_error_without_its_text(
        sim: Running, log_lines: io.StringIO) -> None:
    """An error no code awaited, in the router's loop (a task's exception never retrieved, a
    callback that raised), is logged as an `event_loop_error` with asyncio's words and the
    exception's class: asyncio's own handler wrote the task's repr, the exception's text in it
    (here a canary), past every filter."""
    telemetry, _ = in_memory_telemetry()
    async with serve(sim.base_url, telemetry):
        loop = asyncio.get_running_loop()
        task = loop.create_task(_fails(CANARY))
        await asyncio.sleep(0)
        del task
        gc.collect()  # the task's end without a reader is reported when it is freed
        loop.call_soon(_fails(PERSIAN_CANARY).send, None)  # a callback that raises
        await asyncio.sleep(0.01)
    events = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    errors = [e for e in events if e["event"] == "event_loop_error"]
    assert {(e["what"], e["exception"]) for e in errors} == {
        ("Task exception was never retrieved", "ValueError"),
        ("Exception in callback", "ValueError")}
    assert all("_fails" in e["traceback"] for e in errors)
    assert CANARY not in log_lines.getvalue() and PERSIAN_CANARY not in log_lines.getvalue()


def test_an_error_that_ends_a_thread_is_logged_without_its_text(
        log_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that ends a thread (an exporter's) is a `thread_error` event through the
    service's handlers, with the thread's name and the exception's class; Python's default hook
    printed its text to stderr. A thread's `SystemExit` stays quiet."""
    monkeypatch.setattr(threading, "excepthook", thread_error_event)

    def fail() -> None:
        raise RuntimeError(f"export of {CANARY} with {API_KEY} failed")

    def leave() -> None:
        raise SystemExit(CANARY)

    for target, name in ((fail, "exporter"), (leave, "leaver")):
        thread = threading.Thread(target=target, name=name)
        thread.start()
        thread.join()
    events = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    assert [(e["event"], e["thread"], e["exception"]) for e in events] == [
        ("thread_error", "exporter", "RuntimeError")]
    assert CANARY not in log_lines.getvalue() and API_KEY not in log_lines.getvalue()


def test_redacting_filter_removes_secrets_and_content_fields() -> None:
    """Known secrets, secret-shaped strings and content-bearing fields never reach the output."""
    stream = io.StringIO()
    logger = logging.getLogger("tests.telemetry.redact")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter(["provider-key-abcdef123"]))
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("auth failed for %s", "Bearer abcdefghijklmnop")
        logger.warning("upstream_error", extra={"event_data": {
            "detail": "key provider-key-abcdef123 rejected; api_key=hunter2hunter2",
            "messages": [{"role": "user", "content": CANARY}], "nested": {"prompt": CANARY},
            "other": "sk-proj-ABCDEFGHIJKLMNOP"}})
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert text.count("\n") == 2
    for leaked in ("abcdefghijklmnop", "provider-key-abcdef123", "hunter2hunter2", CANARY,
                   "sk-proj-ABCDEFGHIJKLMNOP"):
        assert leaked not in text
    assert "[REDACTED]" in text and "[content withheld]" in text


def test_content_reaches_spans_only_for_opted_in_tenants() -> None:
    """Recorded content is exported for a tenant in `capture_content_tenants`, never otherwise."""
    from router.telemetry.settings import TelemetrySettings
    from tests.telemetry.helpers import streamed_with_retry

    exported = {}
    for tenant in ("opted-in", "tenant-one"):
        telemetry, exporter = in_memory_telemetry(TelemetrySettings(
            sample_ratio=1.0, capture_content_tenants=frozenset({"opted-in"})))
        outcome, _ = streamed_with_retry()
        outcome.captured_input = f'[{{"role":"user","content":"{CANARY}"}}]'
        outcome.tenant = tenant
        telemetry.sink.record(outcome)
        exported[tenant] = "".join(s.to_json() for s in exporter.get_finished_spans())
    assert CANARY in exported["opted-in"] and "gen_ai.input.messages" in exported["opted-in"]
    assert CANARY not in exported["tenant-one"] and exported["tenant-one"]


async def test_an_opted_in_tenants_served_requests_carry_their_content_on_the_span(
        sim: Running, log_lines: io.StringIO) -> None:
    """Served end to end: with the tenant in `capture_content_tenants`, its server spans hold
    the request and answer messages (whole and streamed); the logs still hold none of it."""
    from router.telemetry.settings import TelemetrySettings

    telemetry, exporter = in_memory_telemetry(TelemetrySettings(
        sample_ratio=1.0, capture_content_tenants=frozenset({"tenant-one"})))
    async with serve(sim.base_url, telemetry) as base:
        await _traffic(base)
    telemetry.sink.flush()
    servers = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    captured = [s for s in servers if s.attributes and "gen_ai.input.messages" in s.attributes]
    answered = [s for s in captured if s.attributes and "gen_ai.output.messages" in s.attributes]
    assert len(captured) >= 2 and len(answered) >= 2
    assert all(CANARY in str(s.attributes["gen_ai.input.messages"]) for s in captured)
    assert CANARY not in log_lines.getvalue()


HASHED_KEY = "tenant2-Zx9Qm4Lp7Rt2Wv8Yb3Nc"  # known to the router by its SHA-256 only


async def test_a_key_configured_by_its_hash_pasted_into_a_request_id_or_tracestate_is_kept_out(
        sim: Running, log_lines: io.StringIO) -> None:
    """A `key_sha256` client key is in no redaction list: pasted into `x-request-id` it was
    the access log's `request_id` and the server span's `slorouter.request_id` as sent (the
    telemetry audit of 2026-12-07). An id holding the request's own key, or any configured
    key as one of its parts, is a 400 `invalid_request_id` under an id made here (after the
    401 of a caller without a key); a `tracestate` holding one is dropped, as an invalid one
    is: neither reaches a log line or a span."""
    digest = hashlib.sha256(HASHED_KEY.encode()).hexdigest()
    config = CONFIG.format(base=sim.base_url) + (
        f"  - key_sha256: {digest}\n    tenant: tenant-two\n")
    telemetry, exporter = in_memory_telemetry()
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    own, other = f"Bearer {HASHED_KEY}", f"Bearer {API_KEY}"
    async with serve(sim.base_url, telemetry, whole_config=config) as base, \
            httpx.AsyncClient(base_url=base, timeout=30) as client:
        for authorization, request_id, status in (
                (own, HASHED_KEY, 400), (own, f"retry of {HASHED_KEY} #2", 400),
                (other, HASHED_KEY, 400), (None, f"id:{HASHED_KEY}", 401)):
            headers = {"x-request-id": request_id}
            if authorization is not None:
                headers["authorization"] = authorization
            refused = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert refused.status_code == status, (request_id, refused.text)
            assert len(refused.headers["x-request-id"]) == 32  # one made here
            if status == 400:
                assert refused.json()["error"]["code"] == "invalid_request_id"
                assert HASHED_KEY not in refused.text
        traced = await client.post("/v1/chat/completions", json=body, headers={
            "authorization": own, "x-request-id": "req-clean-1",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": f"rojo=00f067aa0ba902b7,acme={HASHED_KEY}"})
        assert traced.status_code == 200 and traced.headers["x-request-id"] == "req-clean-1"
    telemetry.sink.flush()
    spans = exporter.get_finished_spans()
    ids = {s.attributes.get("slorouter.request_id") for s in spans
           if s.kind == SpanKind.SERVER and s.attributes}
    assert "req-clean-1" in ids
    logs = log_lines.getvalue()
    assert logs.count("request_finished") >= 5
    for emitted in (*(span.to_json() for span in spans), logs):
        assert HASHED_KEY not in emitted
