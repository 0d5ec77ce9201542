"""Attempts sent but not answered are billed too, so a request's cost sums its attempts.

Served end to end (the real app over uvicorn, the real `openai` client, a hand-written upstream
on a real port whose answers the test sets per model): a hedge's loser, cancelled once the other
attempt answered (streamed or not), an attempt cut by the client's deadline (a 504), one whose
upstream closed the connection without answering and one its adapter gave up waiting for (the
deployment's `timeout_s`) are priced at their deployment's input price for the router's prompt
estimate, marked estimated, on their attempt span, in the request's `slorouter.cost_usd` and in
`slorouter.cost` by their own deployment, through either adapter. An error answer (a 500, or a
504: the upstream answered that it timed out) is not billed and records no cost at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

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
CUT_AFTER_HEAD = -2  # a streamed 200's head, then the connection closed
DROP = 0  # an answer's status that says: close the connection without answering
ADAPTERS = ["openai_passthrough", "litellm"]


def _chunk(model: str, delta: dict[str, str], finish: str | None) -> bytes:
    return b"data: " + orjson.dumps({
        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + b"\n\n"


def _stream_body(model: str) -> bytes:
    """A whole SSE answer: its content, its finish, its usage, `[DONE]`."""
    usage = orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 0,
                          "model": model, "choices": [], "usage": USAGE})
    return (_chunk(model, {"role": "assistant", "content": "Ar Men."}, None)
            + _chunk(model, {}, "stop") + b"data: " + usage + b"\n\ndata: [DONE]\n\n")


class Upstream(ThreadedUpstream):
    """An OpenAI-compatible upstream: per model, the status it answers (`DROP`: none, the
    connection is closed) and after how long; a streamed request gets its answer as SSE."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, float]] = {}
        upstream = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = orjson.loads(self.rfile.read(int(self.headers["content-length"])))
                status, delay_s = upstream.answers.get(body["model"], (200, 0.0))
                time.sleep(delay_s)
                if status == DROP:
                    self.close_connection = True  # the request was read: hang up, no answer
                    return
                if status == CUT_AFTER_HEAD:  # a 200 stream's head, then the line is cut
                    self.close_connection = True
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    return
                if status == 200 and body.get("stream"):
                    with contextlib.suppress(OSError):
                        send_body(self, 200, _stream_body(body["model"]), "text/event-stream")
                    return
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


def _config(base: str, adapter: str = "openai_passthrough",
            alternate_timeout_s: float = 10.0) -> str:
    deps = [Dep("d-primary", "primary", adapter, price_in=PRIMARY_IN, price_out=OUT),
            Dep("d-alternate", "alternate", adapter, alternate_timeout_s, ALTERNATE_IN, OUT)]
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


async def _warmed_up(base: str, telemetry: Telemetry, exporter: InMemorySpanExporter,
                     stream: bool = False) -> openai.AsyncOpenAI:
    """A client, after enough fast answers from `primary` for the router to hedge it: of the
    kind to be hedged (a streamed request's hedge delay is read from streamed answers' TTFT,
    a whole answer's from whole answers' E2E)."""
    client = _client(base)
    for _ in range(WARM_UP):
        if stream:
            async for _chunk in await client.chat.completions.create(
                    model="auto", messages=MESSAGES, stream=True):
                pass
        else:
            await client.chat.completions.create(model="auto", messages=MESSAGES)
    await _spans(telemetry, exporter, WARM_UP)
    return client


def _by_deployment(attempts: list[ReadableSpan]) -> dict[str, dict[str, object]]:
    return {str((s.attributes or {})["slorouter.deployment"]): dict(s.attributes or {})
            for s in attempts}


@dataclass(frozen=True)
class Hedged:
    """What one request the router could hedge recorded: who answered, with what, its server
    span's attributes, its attempt spans' by deployment, and what `slorouter.cost` counted
    for it by (deployment, estimated) (a slow warm-up answer may have been hedged too)."""

    answered_by: str
    content: str
    server: dict[str, object]
    attempts: dict[str, dict[str, object]]
    counted: dict[tuple[str, str], float]


async def _hedged(upstream: Upstream, answers: dict[str, tuple[int, float]],
                  config: str | None = None, stream: bool = False) -> Hedged:
    """After a warm-up that lets the router hedge `primary`, `upstream` answers as `answers`
    says and one request (streamed or not) is sent: what the router recorded for it."""
    telemetry, exporter = in_memory_telemetry()
    whole = config if config is not None else _config(upstream.base_url)
    async with serve(upstream.base_url, telemetry, whole_config=whole, env=TENANT_ENV) as base:
        client = await _warmed_up(base, telemetry, exporter, stream)
        before = await _costs(base)
        upstream.answers.update(answers)
        if stream:
            streamed = await client.chat.completions.with_raw_response.create(
                model="auto", messages=MESSAGES, stream=True)
            headers = streamed.headers
            content = "".join([chunk.choices[0].delta.content or "" async for chunk
                               in streamed.parse() if chunk.choices])
        else:
            answer = await client.chat.completions.with_raw_response.create(
                model="auto", messages=MESSAGES)
            headers = answer.headers
            content = answer.parse().choices[0].message.content or ""
        await client.close()
        server, attempts = await _spans(telemetry, exporter, WARM_UP + 1)
        after = await _costs(base)
    counted = {key: value - before.get(key, 0.0) for key, value in after.items()
               if value != before.get(key, 0.0)}
    return Hedged(headers["x-slorouter-model"], content, dict(server.attributes or {}),
                  _by_deployment(attempts), counted)


PRIMARY_PROMPT = PROMPT * PRIMARY_IN / 1e6  # a prompt sent unanswered, on each deployment
ALTERNATE_PROMPT = PROMPT * ALTERNATE_IN / 1e6
ANSWERED_BY_PRIMARY = (USAGE["prompt_tokens"] * PRIMARY_IN + USAGE["completion_tokens"] * OUT) / 1e6
ANSWERED_BY_ALTERNATE = (USAGE["prompt_tokens"] * ALTERNATE_IN
                         + USAGE["completion_tokens"] * OUT) / 1e6


@pytest.mark.parametrize("stream", [False, True])
async def test_a_hedges_cancelled_loser_is_priced_beside_the_winner(
        upstream: Upstream, stream: bool) -> None:
    """`primary` answers fast until the hedge delay exists, then takes 3 s: the hedge on
    `alternate` answers first and the primary is cancelled. The provider billed the primary's
    prompt all the same: its attempt span carries that estimate, the request costs both, and
    the counter shows each on its own deployment. Streamed, the winner is priced at the usage
    its stream ended with, the loser as a whole answer's."""
    hedged = await _hedged(upstream, {"primary": (200, 3.0)}, stream=stream)
    assert (hedged.answered_by, hedged.content) == ("d-alternate", "Ar Men.")
    loser, winner = hedged.attempts["d-primary"], hedged.attempts["d-alternate"]
    assert loser["slorouter.attempt.outcome"] == "cancelled"
    assert loser["slorouter.cost_usd"] == pytest.approx(PRIMARY_PROMPT)
    assert loser["slorouter.cost.estimated"] is True
    assert winner["slorouter.attempt.kind"] == "hedge"
    assert winner["slorouter.cost_usd"] == pytest.approx(ANSWERED_BY_ALTERNATE)
    assert "slorouter.cost.estimated" not in winner
    assert hedged.server["slorouter.cost_usd"] == pytest.approx(
        ANSWERED_BY_ALTERNATE + PRIMARY_PROMPT)
    assert hedged.server["slorouter.cost.estimated"] is True  # part of it is an estimate
    assert hedged.counted == {("d-primary", "true"): pytest.approx(PRIMARY_PROMPT),
                              ("d-alternate", "false"): pytest.approx(ANSWERED_BY_ALTERNATE)}


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("unanswered", "stream"), [(DROP, False), (CUT_AFTER_HEAD, True)],
                         ids=["dropped", "stream-cut-before-content"])
async def test_an_attempt_its_upstream_left_unanswered_is_priced(
        upstream: Upstream, adapter: str, unanswered: int, stream: bool) -> None:
    """`primary` reads the request and closes the connection without a word (502
    `upstream_dropped`), or answers a stream's 200 head and cuts the line before any content
    (`upstream_stream_cut`, nothing reached the client); the request falls back to
    `alternate`, which answers. The first attempt was sent, and its provider may have
    processed it: it is priced at its prompt, estimated, beside the answer."""
    upstream.answers["primary"] = (unanswered, 0.0)
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, env=TENANT_ENV,
                     whole_config=_config(upstream.base_url, adapter)) as base:
        client = _client(base)
        response = await client.chat.completions.with_raw_response.create(
            model="auto", messages=MESSAGES, stream=stream)
        if stream:
            chunks = response.parse()
            assert isinstance(chunks, openai.AsyncStream)
            text = "".join([c.choices[0].delta.content or "" async for c in chunks
                            if c.choices])
            assert text == "Ar Men."
        await client.close()
        server, attempts = await _spans(telemetry, exporter)
        costs = await _costs(base)
    assert response.headers["x-slorouter-model"] == "d-alternate"
    spans = _by_deployment(attempts)
    unpaid, answered_by = spans["d-primary"], spans["d-alternate"]
    assert (unpaid["slorouter.attempt.outcome"], unpaid["error.type"]) == (
        "failed", "ProviderError")
    assert unpaid["slorouter.cost_usd"] == pytest.approx(PRIMARY_PROMPT)
    assert unpaid["slorouter.cost.estimated"] is True
    assert answered_by["slorouter.cost_usd"] == pytest.approx(ANSWERED_BY_ALTERNATE)
    attributes = server.attributes or {}
    assert attributes["slorouter.cost_usd"] == pytest.approx(
        ANSWERED_BY_ALTERNATE + PRIMARY_PROMPT)
    assert attributes["slorouter.cost.estimated"] is True
    assert costs == {("d-primary", "true"): pytest.approx(PRIMARY_PROMPT),
                     ("d-alternate", "false"): pytest.approx(ANSWERED_BY_ALTERNATE)}


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_hedge_its_adapter_gave_up_waiting_for_is_priced(
        upstream: Upstream, adapter: str) -> None:
    """Once hedged, `primary` answers after 3 s, and the hedge on `alternate` (`timeout_s` 1)
    gets no answer at all: its adapter's own timeout ends it (`upstream_read_timeout`, not the
    `upstream_timeout` of an upstream that answered 504), and it is priced at its prompt."""
    config = _config(upstream.base_url, adapter, alternate_timeout_s=1.0)
    hedged = await _hedged(upstream, {"primary": (200, 3.0), "alternate": (200, 6.0)}, config)
    assert hedged.answered_by == "d-primary"
    hedge, winner = hedged.attempts["d-alternate"], hedged.attempts["d-primary"]
    assert (hedge["slorouter.attempt.kind"], hedge["slorouter.attempt.outcome"]) == (
        "hedge", "failed")
    assert hedge["error.type"] == "ProviderTimeoutError"
    assert hedge["slorouter.cost_usd"] == pytest.approx(ALTERNATE_PROMPT)
    assert hedge["slorouter.cost.estimated"] is True
    assert winner["slorouter.cost_usd"] == pytest.approx(ANSWERED_BY_PRIMARY)
    assert hedged.server["slorouter.cost_usd"] == pytest.approx(
        ANSWERED_BY_PRIMARY + ALTERNATE_PROMPT)
    assert hedged.counted == {("d-alternate", "true"): pytest.approx(ALTERNATE_PROMPT),
                              ("d-primary", "false"): pytest.approx(ANSWERED_BY_PRIMARY)}


async def test_a_hedged_primary_that_answered_an_error_is_not_priced(
        upstream: Upstream) -> None:
    """Once hedged, `primary` answers a 500 while the hedge still waits, and the hedge then
    answers: the primary failed (no bill for an error answer), it was not cancelled."""
    # The hedge starts within 3 median first tokens of the warm-up (`HedgeDelays`), well
    # before the primary's 500 even on a loaded machine, and answers after it.
    hedged = await _hedged(upstream, {"primary": (500, 1.5), "alternate": (200, 2.0)})
    loser, winner = hedged.attempts["d-primary"], hedged.attempts["d-alternate"]
    assert loser["slorouter.attempt.outcome"] == "failed"
    assert loser["error.type"] == "ProviderUnavailableError"  # the 500
    assert "slorouter.cost_usd" not in loser
    assert winner["slorouter.attempt.kind"] == "hedge"
    assert hedged.server["slorouter.cost_usd"] == winner["slorouter.cost_usd"]
    assert ("d-primary", "true") not in hedged.counted


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


@pytest.mark.parametrize(("adapter", "status"), [
    ("openai_passthrough", 500), ("openai_passthrough", 504), ("litellm", 504)])
async def test_an_error_answer_records_no_cost(upstream: Upstream, adapter: str,
                                               status: int) -> None:
    """Both deployments answer an error: the provider bills no error answer, so no cost
    anywhere. A 504 is the upstream answering that it timed out: not the adapter's own timeout,
    which is priced (above)."""
    upstream.answers.update(primary=(status, 0.0), alternate=(status, 0.0))
    telemetry, exporter = in_memory_telemetry()
    async with serve(upstream.base_url, telemetry, env=TENANT_ENV,
                     whole_config=_config(upstream.base_url, adapter)) as base:
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
