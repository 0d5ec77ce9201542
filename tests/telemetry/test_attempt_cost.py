"""Attempts sent but not answered are billed too, so a request's cost sums its attempts.

Served end to end (the real app over uvicorn, the real `openai` client, a hand-written upstream
on a real port whose answers the test sets per model): a hedge's loser, cancelled once the other
attempt answered, and an attempt cut by the client's deadline (a 504) are priced at their
deployment's input price for the router's prompt estimate, marked estimated, on their attempt
span, in the request's `slorouter.cost_usd` and in `slorouter.cost` by their own deployment.
An error answer (a 500) is not billed by the provider and records no cost at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import aiohttp
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from router.classify.types import RequestView
from router.pipeline import estimate_prompt_tokens
from router.telemetry.setup import Telemetry
from tests.faults.scenarios import API_KEY, TENANT_ENV, Dep, router_yaml
from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.telemetry.helpers import in_memory_telemetry
from tests.telemetry.served import serve

TEXT = "Name three lighthouses on the coast of Brittany."
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": TEXT}]
PROMPT = estimate_prompt_tokens(RequestView(messages=(("user", TEXT),)))
USAGE = {"prompt_tokens": 14, "completion_tokens": 6, "total_tokens": 20}
PRIMARY_IN, ALTERNATE_IN, OUT = 1.0, 3.0, 2.0  # USD per million tokens
POLICIES = """policies:
  default:
    candidates: [primary]
    fallbacks: [alternate]
    hedging: true
"""
RELIABILITY = "    hedge_budget: {share: 1.0, floor_per_s: 100}"
WARM_UP = 30  # the hedge delay needs 20 first tokens on `primary` before it exists


class Upstream(ThreadedUpstream):
    """An OpenAI-compatible upstream: per model, the status it answers and after how long."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, float]] = {}
        upstream = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = orjson.loads(self.rfile.read(int(self.headers["content-length"])))
                status, delay_s = upstream.answers.get(body["model"], (200, 0.0))
                time.sleep(delay_s)
                answer = ({"id": "c", "object": "chat.completion", "created": 0,
                           "model": body["model"], "usage": USAGE, "choices": [{
                               "index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Ar Men."}}]}
                          if status == 200 else {"error": {"message": "boom", "type": "server"}})
                with contextlib.suppress(OSError):  # the router hung up (cancelled, timed out)
                    send_body(self, status, orjson.dumps(answer))

        super().__init__(Handler)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    running = Upstream()
    yield running
    running.stop()


def _config(base: str) -> str:
    deps = [Dep("d-primary", "primary", price_in=PRIMARY_IN, price_out=OUT),
            Dep("d-alternate", "alternate", price_in=ALTERNATE_IN, price_out=OUT)]
    return router_yaml(base, deps, {"primary": ["d-primary"], "alternate": ["d-alternate"]},
                       RELIABILITY, POLICIES)


def _client(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)


async def _spans(telemetry: Telemetry, exporter: InMemorySpanExporter,
                 servers: int = 1) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The last request's server span and its attempt (client) spans, once recorded."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        telemetry.sink.flush()
        spans = exporter.get_finished_spans()
        found = [s for s in spans if s.kind == SpanKind.SERVER]
        if len(found) >= servers:
            server = found[-1]
            assert server.context is not None
            attempts = [s for s in spans if s.kind == SpanKind.CLIENT and s.parent is not None
                        and s.parent.trace_id == server.context.trace_id]
            return server, attempts
        await asyncio.sleep(0.05)
    raise AssertionError("no server span was recorded")


async def _costs(base: str) -> dict[tuple[str, str], float]:
    """`slorouter_cost_usd_total` by (deployment, estimated)."""
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as response:
        text = await response.text()
    family = next((f for f in text_string_to_metric_families(text)
                   if f.name == "slorouter_cost_usd"), None)
    return {(s.labels["slorouter_deployment"], s.labels["slorouter_cost_estimated"]): s.value
            for s in getattr(family, "samples", []) if s.name.endswith("_total")}


async def _warmed_up(base: str, telemetry: Telemetry,
                     exporter: InMemorySpanExporter) -> openai.AsyncOpenAI:
    """A client, after enough fast answers from `primary` for the router to hedge it."""
    client = _client(base)
    for _ in range(WARM_UP):
        await client.chat.completions.create(model="auto", messages=MESSAGES)
    await _spans(telemetry, exporter, WARM_UP)
    return client


def _by_deployment(attempts: list[ReadableSpan]) -> dict[str, dict[str, object]]:
    return {str((s.attributes or {})["slorouter.deployment"]): dict(s.attributes or {})
            for s in attempts}


async def test_a_hedges_cancelled_loser_is_priced_beside_the_winner(upstream: Upstream) -> None:
    """`primary` answers fast until the hedge delay exists, then takes 3 s: the hedge on
    `alternate` answers first and the primary is cancelled. The provider billed the primary's
    prompt all the same: its attempt span carries that estimate, the request costs both, and
    the counter shows each on its own deployment."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, whole_config=_config(upstream.base_url),
                     env=TENANT_ENV) as base:
        client = await _warmed_up(base, telemetry, exporter)
        before = await _costs(base)
        upstream.answers["primary"] = (200, 3.0)
        response = await client.chat.completions.with_raw_response.create(
            model="auto", messages=MESSAGES)
        await client.close()
        server, attempts = await _spans(telemetry, exporter, WARM_UP + 1)
        after = await _costs(base)
    assert response.headers["x-slorouter-model"] == "d-alternate"
    spans = _by_deployment(attempts)
    loser, winner = spans["d-primary"], spans["d-alternate"]
    assert loser["slorouter.attempt.outcome"] == "cancelled"
    assert loser["slorouter.cost_usd"] == pytest.approx(PROMPT * PRIMARY_IN / 1e6)
    assert loser["slorouter.cost.estimated"] is True
    answered = (USAGE["prompt_tokens"] * ALTERNATE_IN + USAGE["completion_tokens"] * OUT) / 1e6
    assert winner["slorouter.attempt.kind"] == "hedge"
    assert winner["slorouter.cost_usd"] == pytest.approx(answered)
    assert "slorouter.cost.estimated" not in winner
    attributes = server.attributes or {}
    assert attributes["slorouter.cost_usd"] == pytest.approx(answered + PROMPT * PRIMARY_IN / 1e6)
    assert attributes["slorouter.cost.estimated"] is True  # part of it is an estimate
    assert ("d-primary", "true") not in before
    assert after[("d-primary", "true")] == pytest.approx(PROMPT * PRIMARY_IN / 1e6)
    assert after[("d-alternate", "false")] == pytest.approx(answered)


async def test_a_hedged_primary_that_answered_an_error_is_not_priced(
        upstream: Upstream) -> None:
    """Once hedged, `primary` answers a 500 while the hedge still waits, and the hedge then
    answers: the primary failed (no bill for an error answer), it was not cancelled."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, whole_config=_config(upstream.base_url),
                     env=TENANT_ENV) as base:
        client = await _warmed_up(base, telemetry, exporter)
        # The hedge starts within 3 median first tokens of the warm-up (`HedgeDelays`), well
        # before the primary's 500 even on a loaded machine, and answers after it.
        upstream.answers.update(primary=(500, 1.5), alternate=(200, 2.0))
        await client.chat.completions.create(model="auto", messages=MESSAGES)
        await client.close()
        server, attempts = await _spans(telemetry, exporter, WARM_UP + 1)
        costs = await _costs(base)
    spans = _by_deployment(attempts)
    loser, winner = spans["d-primary"], spans["d-alternate"]
    assert loser["slorouter.attempt.outcome"] == "failed"
    assert loser["error.type"] == "ProviderUnavailableError"  # the 500
    assert "slorouter.cost_usd" not in loser
    assert winner["slorouter.attempt.kind"] == "hedge"
    assert (server.attributes or {})["slorouter.cost_usd"] == winner["slorouter.cost_usd"]
    assert ("d-primary", "true") not in costs


async def test_an_attempt_cut_by_the_clients_deadline_records_the_prompt_cost(
        upstream: Upstream) -> None:
    """The client allows 0.5 s (`x-slorouter-timeout-ms`) and `primary` sends no first token
    for 3 s: a 504 `deadline_exceeded`, for a request the provider was sent and bills the
    prompt of."""
    upstream.answers["primary"] = (200, 3.0)
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, whole_config=_config(upstream.base_url),
                     env=TENANT_ENV) as base:
        client = _client(base)
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="auto", messages=MESSAGES, extra_headers={"x-slorouter-timeout-ms": "500"})
        await client.close()
        server, attempts = await _spans(telemetry, exporter)
        costs = await _costs(base)
    assert raised.value.status_code == 504
    assert raised.value.code == "deadline_exceeded"
    prompt_cost = PROMPT * PRIMARY_IN / 1e6
    (attempt,) = _by_deployment(attempts).values()
    assert attempt["slorouter.cost_usd"] == pytest.approx(prompt_cost)
    assert attempt["slorouter.cost.estimated"] is True
    attributes = server.attributes or {}
    assert attributes["slorouter.cost_usd"] == pytest.approx(prompt_cost)
    assert attributes["slorouter.cost.estimated"] is True
    assert costs == {("d-primary", "true"): pytest.approx(prompt_cost)}


async def test_an_error_answer_records_no_cost(upstream: Upstream) -> None:
    """Both deployments answer 500: the provider bills no error answer, so no cost anywhere."""
    upstream.answers.update(primary=(500, 0.0), alternate=(500, 0.0))
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, whole_config=_config(upstream.base_url),
                     env=TENANT_ENV) as base:
        client = _client(base)
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(model="auto", messages=MESSAGES)
        await client.close()
        server, attempts = await _spans(telemetry, exporter)
        costs = await _costs(base)
    assert raised.value.status_code >= 500
    assert attempts and all("slorouter.cost_usd" not in (s.attributes or {}) for s in attempts)
    assert "slorouter.cost_usd" not in (server.attributes or {})
    assert costs == {}
