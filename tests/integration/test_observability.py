"""Observability at the running service: Prometheus metrics, and no prompt text in any log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import API_KEY, SIM_MODELS, router_config
from tests.support.services import Running, observed_gateway

CANARY = "zebra-quokka-7f3a91 canary"


@pytest.fixture(scope="module")
def debug_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    with observed_gateway(tmp_path_factory.mktemp("observed"), SIM_MODELS, router_config,
                          {"TENANT_ONE_KEY": API_KEY, "SIM_KEY": "sim-key-secret-123"}) as both:
        yield both


def test_metrics_endpoint_is_valid_prometheus_with_genai_histograms(
        debug_gateway: tuple[Running, Path]) -> None:
    """After a request, /metrics parses as Prometheus text and holds the GenAI histograms."""
    router, _ = debug_gateway
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    list(client.chat.completions.create(model="pt-fast", stream=True,
                                        messages=[{"role": "user", "content": "hello"}]))
    text = httpx.get(f"{router.base_url}/metrics", timeout=10).text
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"gen_ai_server_time_to_first_token_seconds",
            "gen_ai_server_request_duration_seconds", "gen_ai_client_token_usage"} <= names


def test_no_prompt_text_or_secret_in_logs_or_traces(debug_gateway: tuple[Running, Path]) -> None:
    """A canary prompt and the keys never appear in the router's output (logs, console spans)."""
    router, log = debug_gateway
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    for stream in (False, True):
        response = client.chat.completions.create(
            model="pt-fast", stream=stream, messages=[{"role": "user", "content": CANARY}])
        if stream:
            list(response)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="pt-fast", messages=[{"role": "user",
                                                                    "content": CANARY}],
                                       temperature=7)
    httpx.get(f"{router.base_url}/metrics", timeout=10)  # flushes queued telemetry
    output = log.read_text(errors="replace")
    assert "request_finished" in output  # the debug outcome log is there...
    assert CANARY.split()[0] not in output  # ...without the prompt
    assert API_KEY not in output and "sim-key-secret-123" not in output


def _console_spans(output: str) -> list[dict[str, object]]:
    """The spans the console exporter printed (one indented JSON object each)."""
    spans, block = [], []
    for line in output.splitlines():
        if line == "{":
            block = [line]
        elif block:
            block.append(line)
            if line == "}":
                spans.append(json.loads("\n".join(block)))
                block = []
    return spans


def test_a_key_or_a_prompt_sent_in_the_wrong_field_reaches_no_log_or_span(
        debug_gateway: tuple[Running, Path]) -> None:
    """A client's key pasted into `model`, `x-request-id` or `tracestate`, and a prompt sent as
    the model's name, reach neither the logs nor the spans: the logs redacted the keys but the
    spans carried them, and both carried the prompt (the telemetry audit of 2026-12-07 and its
    re-audit). A model name the configuration does not know is `unknown` there; the client's
    404 still names it."""
    router, log = debug_gateway
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    misplaced = f"Summarize: patient {CANARY}"
    for name in (API_KEY, misplaced):
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model=name, messages=hello)
        assert name in caught.value.message or name == API_KEY
    answered = client.chat.completions.with_raw_response.create(
        model="pt-fast", messages=hello, extra_headers={
            "x-request-id": "sim-key-secret-123", "tracestate": "acme=sim-key-secret-123",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
    assert answered.headers["x-request-id"] == "sim-key-secret-123"  # the client's own id
    httpx.get(f"{router.base_url}/metrics", timeout=10)  # flushes queued telemetry
    # ... to the span processor, which prints its batch within 5 s
    wait_until = time.monotonic() + 20
    while '"gen_ai.request.model": "unknown"' not in log.read_text(errors="replace"):
        assert time.monotonic() < wait_until, "no span of the unknown models was printed"
        time.sleep(0.2)
    output = log.read_text(errors="replace")
    for secret in (API_KEY, "sim-key-secret-123", CANARY.split()[0]):
        assert secret not in output


def test_the_answering_attempts_span_carries_its_token_usage(
        debug_gateway: tuple[Running, Path]) -> None:
    """The upstream attempt (CLIENT) span of an answer has `gen_ai.usage.*`, streamed or not."""
    router, log = debug_gateway
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    client.chat.completions.create(model="pt-fast",
                                   messages=[{"role": "user", "content": "usage, whole"}])
    list(client.chat.completions.create(model="pt-fast", stream=True,
                                        stream_options={"include_usage": True},
                                        messages=[{"role": "user", "content": "usage, streamed"}]))
    httpx.get(f"{router.base_url}/metrics", timeout=10)  # flushes queued telemetry
    deadline = time.monotonic() + 20.0  # the span processor exports in batches
    while True:
        spans = _console_spans(log.read_text(errors="replace"))
        attempts = [s for s in spans if s.get("kind") == "SpanKind.CLIENT"]
        with_usage = [s for s in attempts
                      if "gen_ai.usage.output_tokens" in s["attributes"]]  # type: ignore[operator]
        if len(with_usage) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(with_usage) >= 2, attempts[-2:]
