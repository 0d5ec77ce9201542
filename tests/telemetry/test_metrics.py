"""GenAI metrics and `/metrics`: valid Prometheus text, recommended buckets, registered gauges."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from policies.eval_report import EvalResult, QualityTable
from router.errors import ProviderTimeoutError
from router.execution.attempt import AttemptRecord
from router.gauges import register_evals
from router.telemetry.metrics import (
    BREAKER_STATE,
    DURATION_BUCKETS,
    TOKEN_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from router.telemetry.settings import TelemetrySettings
from tests.support.services import Running
from tests.telemetry.helpers import in_memory_telemetry, streamed_with_retry
from tests.telemetry.served import API_KEY, serve

GENAI = {
    "gen_ai_server_request_duration_seconds": DURATION_BUCKETS,
    "gen_ai_server_time_to_first_token_seconds": TTFT_BUCKETS,
    "gen_ai_server_time_per_output_token_seconds": TPOT_BUCKETS,
    "gen_ai_client_operation_duration_seconds": DURATION_BUCKETS,
    "gen_ai_client_token_usage": TOKEN_BUCKETS,
}


def _families() -> dict[str, object]:
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    outcome, _ = streamed_with_retry()
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_text_parses_and_holds_every_genai_histogram() -> None:
    """The exposition parses with prometheus_client and has the five GenAI histograms."""
    families = _families()
    for name in GENAI:
        assert getattr(families[name], "type", None) == "histogram"


def test_genai_histograms_use_the_recommended_bucket_boundaries() -> None:
    """Each histogram's `le` labels are exactly the semantic conventions' boundaries, then +Inf."""
    families = _families()
    for name, bounds in GENAI.items():
        samples = getattr(families[name], "samples", [])
        les = []
        for sample in samples:
            le = sample.labels.get("le")
            if sample.name.endswith("_bucket") and le is not None and le not in les:
                les.append(le)
        assert [float(le) for le in les] == [*map(float, bounds), float("inf")]


def test_request_metrics_carry_values_and_low_cardinality_labels() -> None:
    """One request: count 1 on E2E and TTFT, tokens by type, no request id or tenant labels."""
    families = _families()
    outcome, _ = streamed_with_retry()
    e2e = getattr(families["gen_ai_server_request_duration_seconds"], "samples", [])
    count = [s for s in e2e if s.name.endswith("_count")]
    total = [s for s in e2e if s.name.endswith("_sum")]
    assert [s.value for s in count] == [1.0]
    assert abs(total[0].value - (outcome.e2e_s or 0)) < 1e-9
    assert count[0].labels["gen_ai_provider_name"] == "openai"
    assert "slorouter_request_id" not in count[0].labels
    assert "slorouter_tenant" not in count[0].labels
    tokens = getattr(families["gen_ai_client_token_usage"], "samples", [])
    sums = {s.labels["gen_ai_token_type"]: s.value for s in tokens if s.name.endswith("_sum")}
    assert sums == {"input": outcome.prompt_tokens, "output": outcome.completion_tokens}


def test_slorouter_counters_count_decisions_cache_and_retries() -> None:
    """Decisions by route, cache status and retries appear as Prometheus counters."""
    families = _families()
    decisions = getattr(families["slorouter_decisions"], "samples", [])
    retries = getattr(families["slorouter_retries"], "samples", [])
    cache = getattr(families["slorouter_cache_lookups"], "samples", [])
    assert [(s.labels["slorouter_task"], s.value) for s in decisions
            if s.name.endswith("_total")] == [("chat", 1.0)]
    assert [s.value for s in retries if s.name.endswith("_total")] == [1.0]
    assert [s.labels["slorouter_cache"] for s in cache if s.name.endswith("_total")] == ["miss"]


def test_registered_gauges_are_read_at_scrape_time() -> None:
    """A part's gauge callback (e.g. breaker state) is collected into /metrics."""
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    states = {"pt-fast": 0.0, "claude": 2.0}
    telemetry.metrics.register_gauge(
        BREAKER_STATE, lambda: [(v, {"slorouter.deployment": k}) for k, v in states.items()],
        description="0 closed, 1 half-open, 2 open")
    states["pt-fast"] = 1.0
    text = telemetry.prometheus_text().decode()
    family = {f.name: f for f in text_string_to_metric_families(text)}["slorouter_breaker_state"]
    assert {s.labels["slorouter_deployment"]: s.value for s in family.samples} == {
        "pt-fast": 1.0, "claude": 2.0}


def test_snapshots_convert_to_otlp_metrics_data_that_encodes() -> None:
    """Registry snapshots become SDK MetricsData the OTLP encoder accepts, buckets intact."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.resources import Resource

    from router.telemetry.otlp import to_metrics_data

    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    telemetry.sink.record(streamed_with_retry()[0])
    registry = telemetry.metrics.registry
    data = to_metrics_data(registry.collect(), Resource.create({}), registry.start_ns,
                           registry.start_ns + 1)
    request = encode_metrics(data)
    metrics = {m.name: m for m in request.resource_metrics[0].scope_metrics[0].metrics}
    ttft = metrics["gen_ai.server.time_to_first_token"].histogram.data_points[0]
    assert list(ttft.explicit_bounds) == list(TTFT_BUCKETS)
    assert (ttft.count, sum(ttft.bucket_counts)) == (1, 1)
    assert metrics["slorouter.retries"].sum.is_monotonic


class _Kept(MetricExporter):
    """Keeps what it is asked to export."""

    def __init__(self) -> None:
        super().__init__()
        self.exported: list[MetricsData] = []

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **_: Any) -> MetricExportResult:
        self.exported.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        return None


async def test_an_otlp_export_reads_the_gauges_on_the_event_loop() -> None:
    """The gauges read state only the event loop writes (the SLO tracker's kept sums among
    it): a `/metrics` scrape reads them on the loop, and an OTLP export, from its own thread,
    has the loop read them once bound to it. They ran on the export thread until 2026-12-07
    (the re-audit of the tiered SLO windows)."""
    from opentelemetry.sdk.resources import Resource

    from router.telemetry.otlp import PeriodicExport

    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    threads: list[int] = []

    def state() -> list[tuple[float, dict[str, str]]]:
        threads.append(threading.get_ident())
        return [(1.0, {})]

    telemetry.metrics.register_gauge(BREAKER_STATE, state)
    kept = _Kept()
    export = PeriodicExport(telemetry.metrics.registry, kept, Resource.create({}), 3600.0)
    await asyncio.to_thread(export.export_once)  # unbound: where it runs
    export.bind(asyncio.get_running_loop())
    await asyncio.to_thread(export.export_once)
    export.export_once()  # on the loop's own thread (as at shutdown): read there, no wait
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread and threads[1:] == [loop_thread, loop_thread]
    names = [{m.name for m in data.resource_metrics[0].scope_metrics[0].metrics}
             for data in kept.exported]
    assert all(BREAKER_STATE in found for found in names) and len(names) == 3


def test_an_otlp_export_waiting_for_a_busy_loop_at_shutdown_exports_nothing() -> None:
    """An export whose gauges wait for a loop that is busy (the shutdown's own span flush)
    when the shutdown comes exported without them, and the shutdown could then skip its own
    last export, which has them (the re-audit of 2026-12-07): it now exports nothing."""
    from opentelemetry.sdk.resources import Resource

    from router.telemetry.otlp import PeriodicExport

    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    telemetry.sink.record(streamed_with_retry()[0])  # histograms to export besides the gauges
    telemetry.metrics.register_gauge(BREAKER_STATE, lambda: [(1.0, {})])
    kept = _Kept()
    export = PeriodicExport(telemetry.metrics.registry, kept, Resource.create({}), 3600.0)
    busy = asyncio.new_event_loop()  # never run: its callbacks wait
    try:
        export.bind(busy)
        waiting = threading.Thread(target=export.export_once)
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()  # it waits for the loop to read the gauges
        export._stop.set()
        waiting.join(2.0)
        assert not waiting.is_alive() and kept.exported == []
    finally:
        busy.close()


def test_exploration_probes_are_counted_and_marked_on_the_server_span() -> None:
    """`slorouter.explorations` counts probes only; the probe's server span says it was one."""
    telemetry, exporter = in_memory_telemetry()
    probe, _ = streamed_with_retry()
    probe.explored = True
    plain, _ = streamed_with_retry(t0=200.0)
    for outcome in (probe, plain):
        telemetry.sink.record(outcome)
    telemetry.sink.flush()
    text = telemetry.prometheus_text().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    probes = [s for s in families["slorouter_explorations"].samples if s.name.endswith("_total")]
    decisions = [s for s in families["slorouter_decisions"].samples if s.name.endswith("_total")]
    assert [(s.labels["slorouter_task"], s.value) for s in probes] == [("chat", 1.0)]
    assert [s.value for s in decisions] == [2.0]
    servers = [dict(s.attributes or {}) for s in exporter.get_finished_spans()
               if s.name == "chat auto"]
    assert sorted(bool(a.get("slorouter.route.explored")) for a in servers) == [False, True]


def test_admission_rejections_are_counted_by_reason_and_other_503s_are_not() -> None:
    """The admission controller's refusals count by their code; a 503 because a store is down
    (the same error class) is not an admission rejection, nor is an upstream's error that
    carries one of admission's codes (the code says why, not who refused)."""
    from router.outcomes import Outcome

    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    for code, error, by_admission in (
            ("queue_timeout", "OverloadedError", True), ("overloaded", "OverloadedError", True),
            ("tenant_over_share", "TenantRateLimitedError", True),
            ("idempotency_store_unavailable", "OverloadedError", False),
            ("overloaded", "ProviderRejectedError", False),
            ("queue_timeout", "ProviderRejectedError", False)):
        outcome = Outcome(request_id=code, tenant="t", requested_model="auto", stream=False,
                          arrived_at=1.0)
        outcome.status, outcome.error_type, outcome.error_code = 503, error, code
        outcome.refused_by_admission = by_admission
        outcome.ended_at = 1.001
        telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rejections = {s.labels["slorouter_reason"]: s.value
                  for s in getattr(families["slorouter_admission_rejections"], "samples", [])
                  if s.name.endswith("_total")}
    assert rejections == {"queue_timeout": 1.0, "overloaded": 1.0, "tenant_over_share": 1.0}


async def test_requests_refused_or_replayed_by_the_idempotency_store_are_not_routed_decisions(
        sim: Running) -> None:
    """Served end to end: a 422 for a reused Idempotency-Key and a replayed duplicate never
    reached an upstream (nor the cache), so `/metrics` counts neither as a decision nor as a
    cache lookup; the one request that was routed is counted once."""
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    auth = {"authorization": f"Bearer {API_KEY}", "idempotency-key": "metrics-key-1"}
    body = {"model": "auto", "messages": [{"role": "user", "content": "count me once"}]}
    other = {**body, "messages": [{"role": "user", "content": "another question"}]}
    async with serve(sim.base_url, telemetry) as base, aiohttp.ClientSession() as session:
        url = f"{base}/v1/chat/completions"
        statuses = []
        for payload in (body, other, body):  # routed, key reused (422), replayed
            async with session.post(url, json=payload, headers=auth) as response:
                await response.read()
                statuses.append((response.status,
                                 response.headers.get("x-slorouter-idempotent-replay")))
        families = await _scraped_once_recorded(session, f"{base}/metrics", requests=3)
    assert statuses == [(200, None), (422, None), (200, "true")]
    decisions = [(s.labels["slorouter_model"], s.value)
                 for s in families["slorouter_decisions"].samples if s.name.endswith("_total")]
    lookups = [s.value for s in families["slorouter_cache_lookups"].samples
               if s.name.endswith("_total")]
    assert decisions == [("fast", 1.0)]
    assert lookups == [1.0]


def _served(families: Mapping[str, Any]) -> float:
    family = families.get("gen_ai_server_request_duration_seconds")
    samples = family.samples if family is not None else []
    return float(sum(s.value for s in samples if s.name.endswith("_count")))


async def _scraped_once_recorded(session: aiohttp.ClientSession, url: str,
                                 requests: int) -> Mapping[str, Any]:
    """`/metrics` once all `requests` are recorded (each is recorded after its answer left)."""
    families: Mapping[str, Any] = {}
    for _ in range(100):
        async with session.get(url) as response:
            text = await response.text()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        if _served(families) >= requests:
            break
        await asyncio.sleep(0.02)
    assert _served(families) == requests  # every request is in the request metrics
    return families


def test_a_request_no_model_could_take_is_not_a_decision_for_a_nameless_route() -> None:
    """No eligible model leaves the decision's model empty: the request is an error (in the
    request metrics), not a decision counted under the route `""`."""
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    routed, _ = streamed_with_retry()
    unrouted, _ = streamed_with_retry()
    unrouted.model = ""
    for outcome in (routed, unrouted):
        outcome.routed = True
        telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    decisions = [(s.labels["slorouter_model"], s.value)
                 for s in families["slorouter_decisions"].samples if s.name.endswith("_total")]
    assert decisions == [(routed.model, 1.0)]


def test_the_age_of_each_eval_result_backing_a_floor_is_exported() -> None:
    """`slorouter.evals.result_age`: seconds since each backing result's report was created,
    read at scrape time (so it grows while the router runs); results set aside are not shown."""
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    created = datetime(2026, 11, 1, tzinfo=UTC)
    backing = EvalResult(model="fast-model", task="chat", mean=0.8, n=100, lower=0.7, upper=0.9)
    quality = QualityTable({("fast-model", "chat", "accuracy"): backing}, "v1",
                           created={("fast-model", "chat", "accuracy"): created,
                                    ("old-model", "chat", "accuracy"): created},
                           refused={("old-model", "chat", "accuracy"): "too old"})
    now = [created + timedelta(days=3)]
    register_evals(telemetry.metrics, quality, lambda: now[0])

    def ages() -> dict[tuple[str, str], float]:
        text = telemetry.prometheus_text().decode()
        family = {f.name: f for f in text_string_to_metric_families(text)}[
            "slorouter_evals_result_age_seconds"]
        return {(s.labels["model"], s.labels["task"]): s.value for s in family.samples}

    assert ages() == {("fast-model", "chat"): 3 * 86_400.0}
    now[0] += timedelta(hours=1)
    assert ages() == {("fast-model", "chat"): 3 * 86_400.0 + 3_600.0}


def test_a_request_whose_client_left_is_not_counted_as_a_success() -> None:
    """A client that left before its answer ended (499) is `error.type=client_disconnected` in
    the request-duration histogram and on its server span (it had no error type, so it counted
    among the successes); the span's status stays unset: it is not the server's error."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    outcome, _ = streamed_with_retry()
    outcome.status, outcome.client_disconnected = 499, True
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    durations = getattr(families["gen_ai_server_request_duration_seconds"], "samples", [])
    assert {s.labels.get("error_type") for s in durations if s.name.endswith("_count")} == {
        "client_disconnected"}
    server = next(s for s in exporter.get_finished_spans() if s.name == "chat auto")
    assert (server.attributes or {})["error.type"] == "client_disconnected"
    assert server.status.status_code == StatusCode.UNSET


def test_a_whole_answer_its_client_left_has_no_response_model() -> None:
    """A non-streamed request whose client left while its attempt was in flight names that
    attempt's deployment (`slorouter.deployment`, its provider), but no model generated an
    answer: its server span and request metrics have no `gen_ai.response.model`, as its
    attempt span has none (they had it: the telemetry audit of 2026-12-07). A request that was
    answered keeps it."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    left, _ = streamed_with_retry()
    left.request_id, left.stream, left.first_content_at = "req-left", False, None
    left.first_token_at = left.last_token_at = None
    left.prompt_tokens = left.completion_tokens = None
    cut = left.attempts[1]
    cut.outcome, cut.first_content_at, cut.usage = "cancelled", None, None
    left.status, left.client_disconnected = 499, True  # `_name_abandoned` named it
    telemetry.sink.record(left)
    answered, _ = streamed_with_retry()
    telemetry.sink.record(answered)
    servers = {(s.attributes or {})["slorouter.request_id"]: s.attributes or {}
               for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER}
    assert servers["req-left"]["slorouter.deployment"] == "pt-fast"
    assert servers["req-left"]["gen_ai.provider.name"] == "openai"
    assert "gen_ai.response.model" not in servers["req-left"]
    assert servers["req-1"]["gen_ai.response.model"] == "fast"
    families = {f.name: f for f in text_string_to_metric_families(
        telemetry.prometheus_text().decode())}
    durations = [s for s in getattr(families["gen_ai_server_request_duration_seconds"],
                                    "samples", []) if s.name.endswith("_count")]
    assert {(s.labels.get("error_type"), s.labels.get("gen_ai_response_model"))
            for s in durations} == {("client_disconnected", ""), ("", "fast")}  # "": none


def test_counted_chunks_are_not_reported_as_output_tokens() -> None:
    """A stream that ended with no usage from the provider (cut, or left by its client) has its
    content chunks counted (for its price); `gen_ai.client.token.usage` and the spans' output
    tokens, whose unit is the token, leave them out instead of reporting chunks as tokens, and
    so does TPOT (chunks of 4 tokens read 4 times slower: the feedback audit of 2026-12-07)."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    outcome, _ = streamed_with_retry()
    outcome.prompt_tokens, outcome.completion_tokens, outcome.chunks_counted = None, 4, True
    for attempt in outcome.attempts:
        attempt.usage = None  # no usage event came
    outcome.status, outcome.client_disconnected = 499, True
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    usage = getattr(families.get("gen_ai_client_token_usage"), "samples", [])
    assert not [s for s in usage if s.labels.get("gen_ai_token_type") == "output"]
    spans = exporter.get_finished_spans()
    assert spans and all("gen_ai.usage.output_tokens" not in (s.attributes or {}) for s in spans)
    assert outcome.first_token_at is not None and outcome.tpot_s is None


def test_a_cancelled_attempt_is_not_counted_as_a_successful_operation() -> None:
    """A hedge loser (or an attempt the client's departure cut) is `error.type=cancelled` in
    `gen_ai.client.operation.duration` and on its client span: without it, its cut-short
    duration was counted among the successes. The span's status stays unset (not a fault)."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    outcome, _ = streamed_with_retry()
    loser = AttemptRecord("pt-fast", 3, outcome.arrived_at + 0.050, kind="hedge")
    loser.outcome, loser.ended_at = "cancelled", outcome.arrived_at + 0.061
    outcome.attempts[1].outcome = "won"
    outcome.attempts.append(loser)
    telemetry.sink.record(outcome)
    text = telemetry.prometheus_text().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    durations = getattr(families["gen_ai_client_operation_duration_seconds"], "samples", [])
    counts = {s.labels.get("error_type") or None: s.value for s in durations
              if s.name.endswith("_count")}
    assert counts == {"ProviderUnavailableError": 1, None: 1, "cancelled": 1}  # None: the winner
    hedge = next(s for s in exporter.get_finished_spans()
                 if (s.attributes or {}).get("slorouter.attempt.number") == 3)
    assert (hedge.attributes or {})["error.type"] == "cancelled"
    assert hedge.status.status_code == StatusCode.UNSET


def _cut_by_the_clients_timeout(waited_s: float) -> Any:
    """A request whose only attempt its client's own 100 ms-or-more timeout cut (504
    `deadline_exceeded`), `waited_s` after it arrived, its task's stall threshold 2 s."""
    outcome, _ = streamed_with_retry()
    attempt = outcome.attempts[0]
    attempt.error = ProviderTimeoutError("request deadline exceeded", code="deadline_exceeded")
    outcome.attempts[:] = [attempt]
    outcome.deployment = outcome.first_content_at = outcome.first_token_at = None
    outcome.last_token_at = outcome.cost_usd = outcome.completion_tokens = None
    outcome.status, outcome.error_type = 504, "ProviderTimeoutError"
    outcome.error_code = "deadline_exceeded"
    outcome.deadline_from_client, outcome.stall_after_s = True, 2.0
    outcome.ended_at = outcome.arrived_at + waited_s
    attempt.ended_at = outcome.ended_at
    return outcome


def _request_labels(outcome: Any) -> list[dict[str, str]]:
    telemetry, _ = in_memory_telemetry(TelemetrySettings())
    telemetry.sink.record(outcome)
    families = {f.name: f for f in text_string_to_metric_families(
        telemetry.prometheus_text().decode())}
    durations = getattr(families["gen_ai_server_request_duration_seconds"], "samples", [])
    return [dict(s.labels) for s in durations if s.name.endswith("_count") and s.value]


def test_a_request_its_clients_own_timeout_cut_is_not_the_providers_timeout() -> None:
    """Cut by its client's shorter timeout before it was a stall, a request is
    `error.type=client_deadline` (it read as the provider's `ProviderTimeoutError`, counted
    against a healthy deployment); cut after waiting past its stall threshold, it is the
    service's timeout still. Either way the error's code is a label, and the provider is the
    one the request was tried on (it was `none` for every request nothing answered)."""
    early = _request_labels(_cut_by_the_clients_timeout(0.1))
    late = _request_labels(_cut_by_the_clients_timeout(2.5))
    assert [(s["error_type"], s["slorouter_error_code"], s["gen_ai_provider_name"])
            for s in early] == [("client_deadline", "deadline_exceeded", "openai")]
    assert [(s["error_type"], s["slorouter_error_code"]) for s in late] == [
        ("ProviderTimeoutError", "deadline_exceeded")]


def test_spans_name_the_error_code_the_client_got_and_each_attempts() -> None:
    """A refusal by the router (`circuit_open`) and an upstream's 503 are both
    `ProviderUnavailableError`; the code tells them apart, on the server span and on each
    attempt's."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    outcome, _ = streamed_with_retry()
    telemetry.sink.record(outcome)
    spans = exporter.get_finished_spans()
    first = next(s for s in spans if (s.attributes or {}).get("slorouter.attempt.number") == 1)
    assert (first.attributes or {})["slorouter.error_code"] == "upstream_unavailable"
    server = next(s for s in spans if s.name == "chat auto")
    assert "slorouter.error_code" not in (server.attributes or {})  # it was answered
    refused, _ = streamed_with_retry()
    refused.status, refused.error_type, refused.error_code = (
        503, "ProviderUnavailableError", "circuit_open")
    telemetry.sink.record(refused)
    server = [s for s in exporter.get_finished_spans() if s.name == "chat auto"][-1]
    assert (server.attributes or {})["slorouter.error_code"] == "circuit_open"
    assert server.status.description == "ProviderUnavailableError"


def test_a_stored_answers_first_token_is_told_apart_from_a_providers() -> None:
    """A streamed cache hit is recorded in the TTFT histogram under its provider too (its first
    token in under a millisecond), so a provider's TTFT looked faster as the hit rate rose; the
    request metrics carry `slorouter.cache`, and a replayed Idempotency-Key answer is marked on
    its server span."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    miss, _ = streamed_with_retry()
    hit, _ = streamed_with_retry()
    hit.cache, hit.attempts = "hit", []
    replay, _ = streamed_with_retry()
    replay.cache, replay.attempts, replay.idempotent_replay = "bypass", [], True
    for outcome in (miss, hit, replay):
        telemetry.sink.record(outcome)
    families = {f.name: f for f in text_string_to_metric_families(
        telemetry.prometheus_text().decode())}
    ttft = getattr(families["gen_ai_server_time_to_first_token_seconds"], "samples", [])
    by_cache = {s.labels["slorouter_cache"]: s.value for s in ttft if s.name.endswith("_count")}
    assert by_cache == {"miss": 1.0, "hit": 1.0, "bypass": 1.0}
    servers = [s for s in exporter.get_finished_spans() if s.name == "chat auto"]
    assert [(s.attributes or {}).get("slorouter.idempotent_replay") for s in servers] == [
        None, None, True]


def test_an_upstreams_own_error_code_is_no_metric_label() -> None:
    """A provider's 4xx code is relayed to the client as it came (the simulator's
    `echoed_request`); as a label of every request histogram, any identifier a provider chose
    was a new series (the memory audit). The label is `upstream_rejected`; the span keeps it."""
    telemetry, exporter = in_memory_telemetry(TelemetrySettings(sample_ratio=1.0))
    outcome, _ = streamed_with_retry()
    outcome.status, outcome.error_type = 400, "ProviderRejectedError"
    outcome.error_code = "echoed_request_7f3a"
    telemetry.sink.record(outcome)
    families = {f.name: f for f in text_string_to_metric_families(
        telemetry.prometheus_text().decode())}
    durations = getattr(families["gen_ai_server_request_duration_seconds"], "samples", [])
    assert {s.labels.get("slorouter_error_code") for s in durations
            if s.name.endswith("_count")} == {"upstream_rejected"}
    server = next(s for s in exporter.get_finished_spans() if s.name == "chat auto")
    assert (server.attributes or {})["slorouter.error_code"] == "echoed_request_7f3a"
