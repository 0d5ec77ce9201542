"""The span tree of a streamed request with a retry, built from its recorded outcome."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from router.errors import ProviderUnavailableError
from router.execution.attempt import AttemptRecord, hedge_budget_spent, retry_budget_spent
from router.telemetry import attributes as A
from router.telemetry.context import start_trace
from router.telemetry.settings import TelemetrySettings
from router.telemetry.spans import span_tree
from tests.support.services import Running
from tests.telemetry.helpers import (
    CLIENT_TRACEPARENT,
    TracedOutcome,
    in_memory_telemetry,
    streamed_with_retry,
)
from tests.telemetry.served import API_KEY, serve


def _spans() -> tuple[list[ReadableSpan], list[str]]:
    telemetry, exporter = in_memory_telemetry()
    outcome, sent = streamed_with_retry()
    telemetry.sink.record(outcome)
    telemetry.sink.flush()
    return list(exporter.get_finished_spans()), sent


def _number(span: ReadableSpan) -> int:
    value = (span.attributes or {})["slorouter.attempt.number"]
    assert isinstance(value, int)
    return value


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_streamed_retry_has_server_steps_attempts_and_stream_spans() -> None:
    """One server span; auth/classify/decide/cache, two attempts and `stream` are its children."""
    spans, _ = _spans()
    tree = span_tree(spans)
    assert sorted(tree) == ["chat auto"]
    assert sorted(tree["chat auto"]) == sorted(
        ["auth", "classify", "decide", "cache", "chat fast", "chat fast", "stream"])


def test_server_span_continues_the_client_trace() -> None:
    """The server span is a SERVER span in the client's trace, parented on the client's span."""
    spans, _ = _spans()
    server = _by_name(spans)["chat auto"][0]
    trace_hex, parent_hex = CLIENT_TRACEPARENT.split("-")[1:3]
    assert server.kind is SpanKind.SERVER
    assert server.context is not None and server.parent is not None
    assert f"{server.context.trace_id:032x}" == trace_hex
    assert f"{server.parent.span_id:016x}" == parent_hex and server.parent.is_remote
    assert all(s.context is not None and s.context.trace_id == server.context.trace_id
               for s in spans)


def test_server_span_carries_genai_and_slorouter_attributes() -> None:
    """GenAI semconv attributes plus task, risk, policy version, cache, cost; no text."""
    spans, _ = _spans()
    outcome, _ = streamed_with_retry()
    attrs = dict(_by_name(spans)["chat auto"][0].attributes or {})
    assert {k: attrs[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name",
                                  "gen_ai.request.model", "gen_ai.response.model",
                                  "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
            } == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                  "gen_ai.request.model": "auto", "gen_ai.response.model": "fast",
                  "gen_ai.usage.input_tokens": outcome.prompt_tokens,
                  "gen_ai.usage.output_tokens": outcome.completion_tokens}
    assert (attrs["slorouter.task"], attrs["slorouter.risk"], attrs["slorouter.cache"],
            attrs["slorouter.policy_version"]) == ("chat", "low", "miss", "pv-123")
    assert attrs["slorouter.cost_usd"] == outcome.cost_usd
    assert attrs["slorouter.attempts"] == 2


def test_attempt_spans_record_provider_number_kind_and_error() -> None:
    """The failed first attempt is an ERROR client span; the retry is marked `retry`."""
    spans, _ = _spans()
    first, second = sorted(_by_name(spans)["chat fast"],
                           key=_number)
    assert first.kind is SpanKind.CLIENT and second.kind is SpanKind.CLIENT
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["error.type"] == "ProviderUnavailableError"
    assert (first.attributes or {})["slorouter.attempt.kind"] == "first"
    assert (second.attributes or {})["slorouter.attempt.kind"] == "retry"
    assert (second.attributes or {})["gen_ai.provider.name"] == "openai"
    assert "error.type" not in (second.attributes or {})
    # where each call went (the deployment's api_base, never its path), and what answered
    for span in (first, second):
        assert ((span.attributes or {})["server.address"],
                (span.attributes or {})["server.port"]) == ("127.0.0.1", 9)
    assert "gen_ai.response.model" not in (first.attributes or {})
    assert (second.attributes or {})["gen_ai.response.model"] == "fast"


def test_attempt_span_ids_match_the_traceparent_sent_upstream() -> None:
    """The provider sees, in its traceparent, the id of the span that describes its call."""
    spans, sent = _spans()
    attempts = sorted(_by_name(spans)["chat fast"],
                      key=_number)
    assert [f"{s.context.span_id:016x}" for s in attempts if s.context] == [
        header.split("-")[2] for header in sent]


def test_span_times_follow_the_recorded_timestamps() -> None:
    """Durations in the spans equal the outcome's perf_counter differences."""
    spans, _ = _spans()
    outcome, _ = streamed_with_retry()
    server = _by_name(spans)["chat auto"][0]
    stream = _by_name(spans)["stream"][0]
    assert server.start_time is not None and server.end_time is not None
    assert stream.start_time is not None and stream.end_time is not None
    assert outcome.e2e_s is not None and outcome.first_content_at is not None
    assert abs((server.end_time - server.start_time) / 1e9 - outcome.e2e_s) < 1e-6
    assert abs((stream.start_time - server.start_time) / 1e9 - (outcome.ttft_s or 0)) < 1e-6


def test_unsampled_trace_exports_no_spans_but_still_metrics() -> None:
    """A client that did not sample gets no spans; the request still counts in metrics."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    assert outcome.trace is not None
    outcome.trace = outcome.trace.__class__(outcome.trace.trace_id, outcome.trace.span_id,
                                            outcome.trace.parent_span_id, False)
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    assert exporter.get_finished_spans() == ()
    assert "gen_ai_server_request_duration_seconds_count" in text


def test_a_deployment_skipped_for_its_open_circuit_is_no_upstream_call() -> None:
    """The runner passes over a deployment whose circuit is open before it tries the next one:
    that record is no upstream call, so it has no client span and no operation duration (it was
    a 0 ms "call" with the error type of a real 5xx, filling error rates during an outage); the
    server span names it instead."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    skipped = AttemptRecord("claude", 1, outcome.arrived_at + 0.0008, outcome="skipped",
                            ended_at=outcome.arrived_at + 0.0008)
    skipped.error = ProviderUnavailableError("circuit open", code="circuit_open")
    for attempt in outcome.attempts:
        attempt.number += 1
    outcome.attempts.insert(0, skipped)
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    spans = list(exporter.get_finished_spans())
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    server = _by_name(spans)["chat auto"][0]
    assert sorted(_number(s) for s in attempts) == [2, 3]
    assert (server.attributes or {})["slorouter.attempts"] == 2
    assert (server.attributes or {})["slorouter.skipped_deployments"] == "claude"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    durations = getattr(families["gen_ai_client_operation_duration_seconds"], "samples", [])
    assert sum(s.value for s in durations if s.name.endswith("_count")) == 2
    assert not any(s.labels.get("gen_ai_request_model") == "claude-x" for s in durations)


def test_a_hedge_that_was_due_and_not_sent_says_why() -> None:
    """A hedge the budget refused is no upstream call either: no client span, no operation
    duration, not a candidate passed over; the server span says why it was not sent, and
    `slorouter.hedges.skipped` counts it by deployment and reason."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    at = outcome.attempts[0].started_at + 0.2
    outcome.attempts.insert(1, AttemptRecord(
        "claude", 2, at, "hedge", "skipped", ended_at=at, error=hedge_budget_spent()))
    for number, attempt in enumerate(outcome.attempts, 1):
        attempt.number = number
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    spans = list(exporter.get_finished_spans())
    server = (_by_name(spans)["chat auto"][0].attributes or {})
    assert sorted(_number(s) for s in spans if s.kind == SpanKind.CLIENT) == [1, 3]
    assert server["slorouter.hedge.skipped"] == "hedge_budget_exhausted"
    assert "slorouter.skipped_deployments" not in server
    assert server["slorouter.attempts"] == 2
    families = {f.name: f for f in text_string_to_metric_families(text)}
    skipped = [(s.labels, s.value) for s in getattr(families["slorouter_hedges_skipped"],
                                                    "samples", []) if s.name.endswith("_total")]
    assert skipped == [({"slorouter_deployment": "claude",
                         "slorouter_reason": "hedge_budget_exhausted"}, 1.0)]
    hedges = getattr(families.get("slorouter_hedges"), "samples", [])
    assert sum(s.value for s in hedges if s.name.endswith("_total")) == 0


def test_the_hedge_delay_a_request_was_planned_with_is_on_its_server_span() -> None:
    """A request that was to be hedged carries the delay its hedge was due after, in ms;
    one that was not to be hedged carries none."""
    telemetry, exporter = in_memory_telemetry()
    planned, _ = streamed_with_retry()
    planned.hedge_delay_s = 0.0834
    unplanned, _ = streamed_with_retry()
    for outcome in (planned, unplanned):
        telemetry.sink.record(outcome)
    servers = [s.attributes or {} for s in exporter.get_finished_spans()
               if s.kind == SpanKind.SERVER]
    assert [s.get("slorouter.hedge.delay_ms") for s in servers] == [83.4, None]


def test_a_retry_the_budget_refused_is_counted_and_named_on_the_request() -> None:
    """The request's first attempt failed and the retry budget refused the retry: the request
    failed with the attempt's 503. The refused retry is no call (no span), not a candidate
    passed over; the server span names its kind and `slorouter.retry_budget.refusals`
    counts it."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    first = outcome.attempts[0]
    assert first.ended_at is not None
    outcome.attempts[1:] = [AttemptRecord("pt-fast", 2, first.ended_at, "retry", "skipped",
                                          ended_at=first.ended_at, error=retry_budget_spent())]
    outcome.deployment, outcome.status, outcome.error_type = None, 503, "ProviderUnavailableError"
    outcome.error_code = "upstream_unavailable"
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    spans = list(exporter.get_finished_spans())
    server = (_by_name(spans)["chat auto"][0].attributes or {})
    assert [_number(s) for s in spans if s.kind == SpanKind.CLIENT] == [1]
    assert server["slorouter.retry_budget.refused"] == "retry"
    assert "slorouter.skipped_deployments" not in server
    families = {f.name: f for f in text_string_to_metric_families(text)}
    refused = [(s.labels, s.value) for s in getattr(families["slorouter_retry_budget_refusals"],
                                                    "samples", []) if s.name.endswith("_total")]
    assert refused == [({"slorouter_deployment": "pt-fast", "slorouter_attempt_kind": "retry"},
                        1.0)]


def test_a_stream_broken_after_its_head_reports_the_200_its_client_got() -> None:
    """A stream cut after it began was sent 200 and ended with an error event: the server span's
    `http.response.status_code` is the 200 the client (and any load balancer) saw, its error in
    `error.type` and an ERROR status (it said 502, which no one was sent)."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    outcome.status, outcome.error_type = 502, "ProviderError"
    outcome.error_code = "upstream_stream_cut"
    telemetry.sink.record(outcome)
    telemetry.sink.flush()
    server = _by_name(list(exporter.get_finished_spans()))["chat auto"][0]
    attributes = server.attributes or {}
    assert attributes["http.response.status_code"] == 200
    assert attributes["error.type"] == "ProviderError"
    assert server.status.status_code == StatusCode.ERROR


def test_a_model_name_no_decision_took_does_not_name_the_server_span() -> None:
    """An unknown model (a 404) or a request refused before its body was read names no span:
    span names stay as few as the configured models and aliases (a client's string made one
    name per string; a refused request was `chat ` with an empty model attribute)."""
    telemetry, exporter = in_memory_telemetry()
    for requested in ("made-up-model-7f3a", ""):
        outcome = TracedOutcome(request_id="r", tenant="t", requested_model=requested,
                                stream=False, arrived_at=100.0, trace=start_trace(None),
                                status=404 if requested else 401, ended_at=100.001)
        telemetry.sink.record(outcome)
    telemetry.sink.flush()
    spans = list(exporter.get_finished_spans())
    assert [s.name for s in spans] == ["chat", "chat"]
    assert (spans[0].attributes or {})["gen_ai.request.model"] == "made-up-model-7f3a"
    assert "gen_ai.request.model" not in (spans[1].attributes or {})
    named, _ = streamed_with_retry()
    assert A.server_span_name(named) == "chat auto"


async def test_a_cache_hits_server_span_names_the_deployment_that_answered(
        sim: Running, tmp_path: Path) -> None:
    """Served end to end with the result cache on: the hit's server span carries the deployment
    whose stored answer it is, with its provider and model (it had none), no attempt, no cost."""
    telemetry, exporter = in_memory_telemetry()
    extra = (f"server:\n  cache:\n    directory: {tmp_path}\n"
             "    default: {enabled: true, ttl_s: 600}\n")
    async with serve(sim.base_url, telemetry, extra) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        caches = []
        for _ in range(2):
            raw = await client.chat.completions.with_raw_response.create(
                model="fast", temperature=0, messages=[{"role": "user", "content": "cached?"}])
            caches.append(raw.headers["x-slorouter-cache"])
        await client.close()
    telemetry.sink.flush()
    assert caches == ["miss", "hit"]
    servers = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    hit = next(s for s in servers if (s.attributes or {}).get("slorouter.cache") == "hit")
    attributes = hit.attributes or {}
    assert attributes["slorouter.deployment"] == "pt-fast"
    assert attributes["gen_ai.response.model"] == "fast"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["slorouter.attempts"] == 0
    assert "slorouter.cost_usd" not in attributes  # no upstream call: nothing was billed


@pytest.mark.parametrize("stream", [False, True])
async def test_a_replayed_idempotency_key_answer_is_marked_on_its_server_span(
        sim: Running, stream: bool) -> None:
    """The second request with the same Idempotency-Key is answered from the first's record: a
    1 ms success with no attempt and `slorouter.cache=bypass`, which read as a request nothing
    explained; its span says `slorouter.idempotent_replay` and names who answered the first
    time (deployment, provider, response model; none until 2026-12-07). Nothing answered the
    replay itself: no provider's metrics count it, nor its first chunk as a TTFT."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(sim.base_url, telemetry) as base:
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0)
        replays = []
        for _ in range(2):
            raw = await client.chat.completions.with_raw_response.create(
                model="fast", messages=[{"role": "user", "content": "once"}], stream=stream,
                extra_headers={"idempotency-key": f"replay-marked-{stream}"})
            replays.append(raw.headers.get("x-slorouter-idempotent-replay"))
            if stream:
                async for _ in raw.parse():  # type: ignore[union-attr]
                    pass
        await client.close()
    telemetry.sink.flush()
    assert replays == [None, "true"]
    servers = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    marks = [(s.attributes or {}).get("slorouter.idempotent_replay") for s in servers]
    assert marks == [None, True], marks
    replay = servers[1].attributes or {}
    assert (replay.get("slorouter.deployment"), replay.get("gen_ai.response.model"),
            replay.get("gen_ai.provider.name")) == ("pt-fast", "fast", "openai")
    text = telemetry.prometheus_text().decode()
    first_tokens = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("gen_ai_server_time_to_first_token_seconds_count"))
    assert first_tokens == (1 if stream else 0)  # the first request's, streamed: not the replay's
    answered = [line for line in text.splitlines()
                if line.startswith("gen_ai_server_request_duration_seconds_count")]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in answered
               if 'gen_ai_provider_name="openai"' in line) == 1, answered


async def test_a_replayed_stored_failure_is_recorded_with_the_status_its_client_got(
        sim: Running) -> None:
    """A side effect whose answer broke once sent keeps a 504 `unknown_commit` for its key;
    a retry with the key gets that 504 from the record, and was recorded as a 200 (span, log,
    availability) until 2026-12-07 (the re-audit of the telemetry changes)."""
    telemetry, exporter = in_memory_telemetry()
    async with serve(sim.base_url, telemetry) as base, aiohttp.ClientSession() as session:
        statuses = []
        # the simulator's 200 whose body is an error: taken once sent, so it may have acted
        body = {"model": "fast", "messages": [{"role": "user", "content": "pay <<fail:stream>>"}]}
        for _ in range(2):
            async with session.post(
                    f"{base}/v1/chat/completions", json=body,
                    headers={"authorization": f"Bearer {API_KEY}", "idempotency-key": "paid-504",
                             "x-slorouter-task": "action"}) as response:
                statuses.append((response.status,
                                 response.headers.get("x-slorouter-idempotent-replay")))
    telemetry.sink.flush()
    assert statuses == [(504, None), (504, "true")]
    servers = [s.attributes or {} for s in exporter.get_finished_spans()
               if s.kind == SpanKind.SERVER]
    assert [(a.get("http.response.status_code"), a.get("slorouter.error_code"),
             a.get("slorouter.idempotent_replay")) for a in servers] == [
        (504, "unknown_commit", None), (504, "unknown_commit", True)]
    assert servers[1]["error.type"] == "replayed_failure"


async def test_a_caller_without_a_valid_key_does_not_choose_what_is_traced(
        sim: Running) -> None:
    """With no trace sampled by the ratio, 20 requests without a valid key (401) whose
    `traceparent` says sampled exported 20 server spans: anyone reaching the port chose what is
    traced (the security audit). They are traced as the ratio decides now; a keyed caller's
    flag is still followed."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=0.0))
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    async with serve(sim.base_url, telemetry) as base, \
            httpx.AsyncClient(base_url=base, timeout=10) as client:
        for key in (None, "sk-not-a-key") * 10:
            headers = {"traceparent": CLIENT_TRACEPARENT}
            if key is not None:
                headers["authorization"] = f"Bearer {key}"
            refused = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert refused.status_code == 401
        telemetry.sink.flush()
        assert not [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
        served = await client.post("/v1/chat/completions", json=body, headers={
            "traceparent": CLIENT_TRACEPARENT, "authorization": f"Bearer {API_KEY}"})
        assert served.status_code == 200
    telemetry.sink.flush()
    servers = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert len(servers) == 1 and (servers[0].attributes or {})["http.response.status_code"] == 200


@pytest.mark.parametrize("tracestate", ["rojo=00f067aa0ba902b7,1abc=hello-from-the-client",
                                        "rojo=00f067aa0ba902b7,sk-abcdefgh1234=hello"])
def test_the_sdk_is_never_given_a_tracestate_member_it_would_log(
        tracestate: str, caplog: pytest.LogCaptureFixture) -> None:
    """A member W3C forbids (a key with a digit first), or one the span builder's redaction made
    one (`[REDACTED]` in a key), is not put on the spans: the SDK refused the whole header and
    logged a WARNING quoting the member for every such request (the telemetry audit of
    2026-12-07). Such a header is dropped whole, as it is not forwarded either."""
    telemetry, exporter = in_memory_telemetry()
    outcome, _ = streamed_with_retry()
    outcome.trace = start_trace(CLIENT_TRACEPARENT, tracestate=tracestate)
    with caplog.at_level(logging.DEBUG, logger="opentelemetry"):
        telemetry.sink.record(outcome)
        telemetry.sink.flush()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []
    spans = exporter.get_finished_spans()
    assert spans and all(s.context is not None and len(s.context.trace_state) == 0
                         for s in spans)


def test_the_arm_is_named_with_its_experiment_as_the_response_header_names_it() -> None:
    """`slorouter.arm` is `experiment/arm`, the `x-slorouter-arm` header's value: it was the
    arm alone (`control`), every experiment's (the telemetry audit of 2026-12-07); an arm
    whose route could not serve (`x-slorouter-arm-degraded`) is marked so. No metric takes
    it as a label."""
    telemetry, exporter = in_memory_telemetry()
    for experiment, arm, degraded in (("exp1", "control", False), ("exp2", "cheaper", True)):
        outcome, _ = streamed_with_retry()
        outcome.experiment, outcome.arm, outcome.arm_degraded = experiment, arm, degraded
        telemetry.sink.record(outcome)
    telemetry.sink.flush()
    servers = [s.attributes or {} for s in exporter.get_finished_spans()
               if s.kind == SpanKind.SERVER]
    assert [(s[A.ARM], s.get(A.ARM_DEGRADED)) for s in servers] == [
        ("exp1/control", None), ("exp2/cheaper", True)]
    assert "exp1" not in telemetry.prometheus_text().decode()
