"""Builders for telemetry tests: deployments, and outcomes recorded the way the handler does.

`TracedOutcome` is `Outcome` plus the two fields telemetry asks the request path to record
(`trace` from `start_trace` at arrival, `steps` as (name, start, end) per pre-execution step);
`streamed_with_retry` fills one in the order `ChatHandler` and `Runner` do for a streamed request
whose first attempt failed and whose retry on the same deployment streamed the answer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from router.errors import ProviderUnavailableError
from router.execution.attempt import AttemptRecord
from router.outcomes import Outcome
from router.providers.base import Deployment, Usage
from router.telemetry.context import TraceContext, attempt_traceparent, start_trace
from router.telemetry.settings import TelemetrySettings
from router.telemetry.setup import Telemetry, build_telemetry

CLIENT_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass(slots=True)
class TracedOutcome(Outcome):
    trace: TraceContext | None = None
    steps: list[tuple[str, float, float]] = field(default_factory=list)


def deployment(name: str, model: str) -> Deployment:
    return Deployment(name=name, model=model, adapter="openai_passthrough",
                      api_base="http://127.0.0.1:9/v1", api_key="sk-secret-never-logged-123",
                      input_price_per_mtok=1.0, output_price_per_mtok=2.0, context_window=None)


DEPLOYMENTS = {"pt-fast": deployment("pt-fast", "openai/fast"),
               "claude": deployment("claude", "anthropic/claude-x")}


def in_memory_telemetry(settings: TelemetrySettings | None = None
                        ) -> tuple[Telemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    chosen = settings if settings is not None else TelemetrySettings(sample_ratio=1.0)
    telemetry = build_telemetry(chosen, DEPLOYMENTS, span_processor=SimpleSpanProcessor(exporter))
    return telemetry, exporter


def streamed_with_retry(t0: float = 100.0) -> tuple[TracedOutcome, list[str]]:
    """The outcome of a streamed request retried once, and the traceparents sent upstream."""
    trace = start_trace(CLIENT_TRACEPARENT)
    outcome = TracedOutcome(request_id="req-1", tenant="tenant-one", requested_model="auto",
                            stream=True, arrived_at=t0, trace=trace)
    outcome.steps += [("auth", t0, t0 + 0.0001), ("classify", t0 + 0.0002, t0 + 0.0005),
                      ("decide", t0 + 0.0005, t0 + 0.0006), ("cache", t0 + 0.0006, t0 + 0.0007)]
    outcome.task, outcome.risk, outcome.model = "chat", "low", "fast-model"
    outcome.policy_version, outcome.cache, outcome.routed = "pv-123", "miss", True
    sent = [attempt_traceparent(trace, 1)]
    first = AttemptRecord("pt-fast", 1, t0 + 0.001)
    first.error = ProviderUnavailableError("upstream 503", code="upstream_unavailable")
    first.ended_at, first.outcome = t0 + 0.030, "failed"
    sent.append(attempt_traceparent(trace, 2))
    second = AttemptRecord("pt-fast", 2, t0 + 0.040, first_content_at=t0 + 0.060)
    second.outcome = "won"
    outcome.attempts += [first, second]
    outcome.deployment, outcome.first_content_at = "pt-fast", t0 + 0.061
    outcome.first_token_at, outcome.last_token_at = t0 + 0.061, t0 + 0.091
    outcome.prompt_tokens, outcome.completion_tokens = 12, 31
    outcome.cost_usd = second.cost_usd = DEPLOYMENTS["pt-fast"].cost_usd(12, 31)
    second.usage = Usage(12, 31)
    outcome.ended_at = t0 + 0.095
    return outcome, sent


async def server_span(telemetry: Telemetry, exporter: InMemorySpanExporter) -> ReadableSpan:
    """The request's server span, once its outcome was recorded (a stream records at its end,
    after the client is gone), its metrics with it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        telemetry.sink.flush()
        servers = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
        if servers:
            return servers[-1]
        await asyncio.sleep(0.05)
    raise AssertionError("no server span was recorded")
