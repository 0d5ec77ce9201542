"""Build one request's span tree after the fact, from the timestamps its `Outcome` recorded.

The tree: a SERVER span `chat {requested model}` (continuing the client's trace), INTERNAL
children for each recorded step (auth, admission, classify, decide, cache), a CLIENT span per
upstream attempt (`chat {upstream model}`, whose id is the one propagated in its `traceparent`)
and an INTERNAL `stream` span from the first content chunk to the last byte. Spans are created
finished (`ReadableSpan`) and handed to the span processors: no tracer, no context switching and
no locks on the request path. Times are `perf_counter` seconds mapped to the epoch by an anchor.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from router.outcomes import Outcome
from router.telemetry import attributes as A
from router.telemetry.attributes import Attributes, DeploymentInfo
from router.telemetry.context import TraceContext, attempt_span_id, valid_tracestate
from router.telemetry.redact import Scrubber

SCOPE = InstrumentationScope("slorouter", "0.1.0")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


@dataclass(frozen=True, slots=True)
class EpochAnchor:
    """One reading of both clocks, to turn `perf_counter` seconds into epoch nanoseconds."""

    epoch_ns: int
    perf_s: float

    @classmethod
    def now(cls, wall_ns: Callable[[], int] = time.time_ns,
            perf: Callable[[], float] = time.perf_counter) -> EpochAnchor:
        return cls(wall_ns(), perf())

    def ns(self, perf_s: float) -> int:
        return self.epoch_ns + int((perf_s - self.perf_s) * 1e9)


class SpanBuilder:
    """Turns outcomes into finished spans and passes them to `processor.on_end`."""

    def __init__(self, processor: SpanProcessor, resource: Resource,
                 deployments: Mapping[str, DeploymentInfo], anchor: EpochAnchor,
                 draw: Callable[[int], int] = random.getrandbits,
                 captures_content: Callable[[str], bool] = lambda _: False,
                 scrub: Callable[[str], str] | None = None) -> None:
        """`scrub`: what a string a client sent (its request id) goes through before it is an
        attribute, as in the logs (a key pasted into `x-request-id` reached the traces)."""
        self._processor = processor
        self._scrub = scrub if scrub is not None else Scrubber()
        self._captures = captures_content
        self._resource = resource
        self._deployments = deployments
        self._anchor = anchor
        self._draw = draw

    def build(self, outcome: Outcome, trace: TraceContext) -> list[ReadableSpan]:
        """The request's spans, server span first; empty when the trace is not sampled."""
        if not trace.sampled or outcome.ended_at is None:
            return []
        # the client's `tracestate` goes on every span: a key pasted there is kept out too, and
        # checked again once scrubbed (`[REDACTED]` in a key is no member), so the SDK is never
        # given one it would refuse: it logs such a member's text
        scrubbed = valid_tracestate(self._scrub(trace.tracestate)) if trace.tracestate else None
        state = TraceState.from_header([scrubbed]) if scrubbed else None
        server_ctx = SpanContext(trace.trace_id, trace.span_id, False, _SAMPLED, state)
        parent = (SpanContext(trace.trace_id, trace.parent_span_id, True, _SAMPLED, state)
                  if trace.parent_span_id is not None else None)
        error = outcome.status >= 500 and outcome.status != 499
        attrs = A.server_attributes(outcome, self._deployments)
        attrs[A.REQUEST_ID] = self._scrub(outcome.request_id)
        if self._captures(outcome.tenant):
            attrs.update(A.content_attributes(outcome))
        spans = [self._span(A.server_span_name(outcome), server_ctx, parent,
                            SpanKind.SERVER, outcome.arrived_at, outcome.ended_at, attrs,
                            A.error_type(outcome) if error else None)]
        for name, started, ended in A.steps_of(outcome):
            spans.append(self._child(name, server_ctx, SpanKind.INTERNAL, started, ended, {}))
        spans.extend(self._attempts(outcome, server_ctx, trace))
        if outcome.stream and outcome.first_content_at is not None:
            stream_attrs: Attributes = {}
            A.put_if(stream_attrs, A.OUTPUT_TOKENS, outcome.reported_completion_tokens)
            spans.append(self._child("stream", server_ctx, SpanKind.INTERNAL,
                                     outcome.first_content_at, outcome.ended_at, stream_attrs,
                                     outcome.error_type if outcome.status >= 500 else None))
        return spans

    def export(self, outcome: Outcome, trace: TraceContext) -> int:
        spans = self.build(outcome, trace)
        for span in spans:
            self._processor.on_end(span)
        return len(spans)

    def _attempts(self, outcome: Outcome, server_ctx: SpanContext,
                  trace: TraceContext) -> list[ReadableSpan]:
        spans = []
        attempts = outcome.attempts
        assert outcome.ended_at is not None
        for index, attempt in enumerate(attempts):
            if not A.made(attempt):
                continue
            ctx = SpanContext(trace.trace_id, attempt_span_id(trace, attempt.number), False,
                              _SAMPLED, server_ctx.trace_state)
            info = self._deployments.get(attempt.deployment)
            model = info.upstream_model if info is not None else attempt.deployment
            ended = attempt.ended_at if attempt.ended_at is not None else outcome.ended_at
            spans.append(self._span(f"chat {model}", ctx, server_ctx, SpanKind.CLIENT,
                                    attempt.started_at, ended,
                                    A.attempt_attributes(attempts, index, self._deployments,
                                                         stream=outcome.stream),
                                    attempt.error_class))
        return spans

    def _child(self, name: str, parent: SpanContext, kind: SpanKind, started: float,
               ended: float, attrs: Attributes, error: str | None = None) -> ReadableSpan:
        ctx = SpanContext(parent.trace_id, self._span_id(), False, _SAMPLED, parent.trace_state)
        return self._span(name, ctx, parent, kind, started, ended, attrs, error)

    def _span_id(self) -> int:
        value = self._draw(64)
        return value if value != 0 else 1

    def _span(self, name: str, ctx: SpanContext, parent: SpanContext | None, kind: SpanKind,
              started: float, ended: float, attrs: Attributes,
              error: str | None) -> ReadableSpan:
        status = Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET)
        return ReadableSpan(name=name, context=ctx, parent=parent, resource=self._resource,
                            attributes=attrs, kind=kind, status=status,
                            start_time=self._anchor.ns(started),
                            end_time=self._anchor.ns(max(ended, started)),
                            instrumentation_scope=SCOPE)


def span_tree(spans: Sequence[ReadableSpan]) -> dict[str, list[str]]:
    """Parent span name → child span names (for tests and debugging)."""
    by_id = {s.context.span_id: s.name for s in spans if s.context is not None}
    tree: dict[str, list[str]] = {}
    for span in spans:
        if span.parent is not None and span.parent.span_id in by_id:
            tree.setdefault(by_id[span.parent.span_id], []).append(span.name)
    return tree
