"""A stream that ends without the provider's usage is still billed, so it still has a cost.

Served end to end (the real app over uvicorn, the provider simulator as a process, the real
`openai` client): a stream the upstream cuts after a few chunks, and one its client closes
after two, reach the server span and `/metrics` with a cost estimated from the router's prompt
estimate and the content chunks counted, marked `slorouter.cost.estimated`, while their token
counts (`gen_ai.usage.*`) stay absent: the provider reported none. The abandoned stream's
attempt is `cancelled`, not a successful operation. A non-streamed request its
client leaves before the answer is priced the same way: its prompt, from the router's estimate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from router.classify.types import RequestView
from router.pipeline import estimate_prompt_tokens
from tests.support.services import FAST_PROFILE, Running, start_simulator
from tests.telemetry.helpers import in_memory_telemetry, server_span
from tests.telemetry.served import API_KEY, serve

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]


def _simulating_fast(factory: pytest.TempPathFactory, name: str, **profile: float) -> Running:
    """The simulator with one model, `fast`, streaming one token a chunk as `profile` says."""
    return start_simulator(factory.mktemp(f"sim-{name}"), {
        "fast": {**FAST_PROFILE, "tokens_per_chunk": 1, **profile}}, name=name)


@pytest.fixture(scope="module")
def cutting_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """`fast` cuts every stream (connection aborted) after three chunks of thirty."""
    running = _simulating_fast(tmp_path_factory, "cut", output_tokens_p50=30,
                               output_tokens_p99=40, cut_rate=1.0, cut_after_chunks=3)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """`fast` streams 200 chunks 20 ms apart: a client has time to leave."""
    running = _simulating_fast(tmp_path_factory, "slow", tpot_p50_ms=20, tpot_p99_ms=21,
                               output_tokens_p50=200, output_tokens_p99=201)
    yield running
    running.stop()


async def _cost_samples(base: str) -> dict[str, float]:
    """`slorouter_cost_usd_total` from `/metrics`, by its `slorouter_cost_estimated` label."""
    samples = await _samples(base, "slorouter_cost_usd")
    return {s.labels["slorouter_cost_estimated"]: s.value for s in samples
            if s.name.endswith("_total")}


async def _operations(base: str) -> dict[str | None, float]:
    """`gen_ai.client.operation.duration` counts from `/metrics`, by `error.type` (None: the
    successes)."""
    samples = await _samples(base, "gen_ai_client_operation_duration_seconds")
    return {s.labels.get("error_type") or None: s.value for s in samples
            if s.name.endswith("_count")}


async def _samples(base: str, family_name: str) -> list[Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    family = next((f for f in text_string_to_metric_families(text) if f.name == family_name),
                  None)
    return list(getattr(family, "samples", []))


def _estimated_cost(span: ReadableSpan) -> float:
    """The span's cost, checked to be estimated and positive, with no token counts reported."""
    attributes = span.attributes or {}
    cost = attributes.get("slorouter.cost_usd")
    assert isinstance(cost, float) and cost > 0.0, attributes
    assert attributes.get("slorouter.cost.estimated") is True
    assert "gen_ai.usage.input_tokens" not in attributes  # no usage came: none is reported
    assert "gen_ai.usage.output_tokens" not in attributes
    return cost


async def test_a_stream_cut_by_the_upstream_records_an_estimated_cost(
        cutting_sim: Running) -> None:
    """The upstream aborts the stream after three chunks: the client gets an error event, and
    the provider bills the prompt and those chunks; the cost is recorded, marked estimated."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(cutting_sim.base_url, telemetry) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        received = 0
        with pytest.raises(openai.APIError):
            async for chunk in await client.chat.completions.create(
                    model="fast", messages=MESSAGES, stream=True):
                received += bool(chunk.choices and chunk.choices[0].delta.content)
        await client.close()
        span = await server_span(telemetry, exporter)
        costs = await _cost_samples(base)
    assert received >= 1  # content had begun: the cut came mid-answer
    _estimated_cost(span)
    assert (span.attributes or {}).get("error.type") == "ProviderError"
    assert costs.get("true", 0.0) > 0.0 and "false" not in costs


async def test_a_stream_its_client_abandons_records_an_estimated_cost(slow_sim: Running) -> None:
    """The real openai client reads two content chunks and closes the stream: the router cancels
    the upstream call and records what was billed so far, marked estimated."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(slow_sim.base_url, telemetry) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        stream = await client.chat.completions.create(
            model="fast", messages=MESSAGES, stream=True)
        content = 0
        async for chunk in stream:
            content += bool(chunk.choices and chunk.choices[0].delta.content)
            if content == 2:
                break
        await stream.close()
        span = await server_span(telemetry, exporter)
        costs = await _cost_samples(base)
        operations = await _operations(base)
        await client.close()
    cost = _estimated_cost(span)
    assert (span.attributes or {}).get("slorouter.client_disconnected") is True
    # The attempt answered first but did not give its answer whole: `cancelled`, not one of the
    # operation's successes (it was, with its cut-short duration, until 2026-12-05).
    [attempt] = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert (attempt.attributes or {}).get("error.type") == "cancelled"
    assert (attempt.attributes or {}).get("slorouter.attempt.outcome") == "won"
    assert operations == {"cancelled": 1}
    # The prompt (~13 tokens estimated) at $1/M and a few chunks at $2/M: far below a whole
    # answer's 200 tokens, which would cost at least $0.0004.
    assert cost < 200 * 2.0 / 1e6
    assert costs.get("true", 0.0) > 0.0



async def test_a_completion_its_client_abandons_records_the_prompt_as_an_estimated_cost(
        slow_sim: Running) -> None:
    """A non-streamed request to a model answering in about 4 s, whose client gives up after
    0.5 s and closes its connection: the router cancels the upstream call, which the provider
    may bill for the prompt it was sent. The cost is the router's prompt estimate at the input
    price (no output is known), marked estimated, on the span and in /metrics (no cost at all
    was recorded before)."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(slow_sim.base_url, telemetry) as base:
        # Not the client's `timeout` (sent as `x-stainless-timeout`, it becomes the router's
        # deadline): the call is cancelled, which closes its connection without a word.
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.chat.completions.create(
                model="fast", messages=MESSAGES), 0.5)
        await client.close()
        span = await server_span(telemetry, exporter)
        costs = await _cost_samples(base)
    cost = _estimated_cost(span)
    attributes = span.attributes or {}
    assert attributes.get("slorouter.client_disconnected") is True
    assert attributes.get("slorouter.deployment") == "pt-fast"
    text = str(MESSAGES[0].get("content"))
    prompt = estimate_prompt_tokens(RequestView(messages=(("user", text),)))
    assert cost == pytest.approx(prompt * 1.0 / 1e6)  # pt-fast's input price, $1/M
    assert costs == {"true": pytest.approx(cost)}
