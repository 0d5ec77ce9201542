"""GenAI and slorouter metrics, recorded from outcomes, with the recommended bucket boundaries.

`RouterMetrics.record(outcome)` records the GenAI histograms (server request duration, TTFT,
TPOT; client operation duration per upstream attempt; token usage) and slorouter's counters
(decisions by route, cache lookups by status, retries, fallbacks, hedges, admission rejections,
attempts a full bulkhead turned away, cost). State that lives elsewhere (breaker state, SLO
attainment and burn) is exported through `register_gauge`, whose callbacks run at collection
time (a scrape or an OTLP export, possibly on the exporter's thread): they must be cheap and
only read. Instruments live in a `MetricRegistry` (see `aggregate` for why not the SDK's
instruments).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from router.execution.attempt import SATURATED
from router.outcomes import Outcome
from router.telemetry import attributes as A
from router.telemetry.aggregate import GaugeCallback, MetricRegistry
from router.telemetry.attributes import AttrValue, DeploymentInfo

REASON: Final = "slorouter.reason"  # why a request was refused, or a hedge not sent

# Recommended ExplicitBucketBoundaries (OpenTelemetry GenAI semantic conventions).
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                           20.48, 40.96, 81.92)
TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                        16777216, 67108864)

# Names other parts register gauges under (see `register_gauge`).
BREAKER_STATE: Final = "slorouter.breaker.state"  # 0 closed, 1 half-open, 2 open; {deployment}
SLO_ATTAINMENT: Final = "slorouter.slo.attainment"  # share of good events; {task, objective}
SLO_BURN_RATE: Final = "slorouter.slo.burn_rate"  # error-budget burn; {task, objective, window}
EVAL_RESULT_AGE: Final = "slorouter.evals.result_age"  # s since created; {model, task, metric}
# Admission pools' occupancy and limits; {slorouter.priority, state: running | queued}.
ADMISSION_REQUESTS: Final = "slorouter.admission.requests"
ADMISSION_LIMIT: Final = "slorouter.admission.limit"
ADMISSION_TENANTS: Final = "slorouter.admission.tenants"  # with requests held; {slorouter.priority}
ADMISSION_MEAN_HOLD: Final = "slorouter.admission.mean_hold"  # s, Retry-After's basis; {…priority}

Labels = Mapping[str, AttrValue]


class RouterMetrics:
    def __init__(self, registry: MetricRegistry,
                 deployments: Mapping[str, DeploymentInfo]) -> None:
        self.registry = registry
        self._deployments = deployments
        hist = registry.histogram
        self.request_duration = hist(
            "gen_ai.server.request.duration", DURATION_BUCKETS, unit="s",
            description="Time from a request's arrival to its last byte (E2E).")
        self.ttft = hist(
            "gen_ai.server.time_to_first_token", TTFT_BUCKETS, unit="s",
            description="Time from a request's arrival to its first content chunk.")
        self.tpot = hist(
            "gen_ai.server.time_per_output_token", TPOT_BUCKETS, unit="s",
            description="(t_last_token - t_first_token) / (output_tokens - 1).")
        self.operation_duration = hist(
            "gen_ai.client.operation.duration", DURATION_BUCKETS, unit="s",
            description="Duration of one upstream attempt.")
        self.token_usage = hist(
            "gen_ai.client.token.usage", TOKEN_BUCKETS, unit="{token}",
            description="Input and output tokens per request.")
        counter = registry.counter
        self.decisions = counter("slorouter.decisions", unit="{request}",
                                 description="Routing decisions by task, risk and model.")
        self.explorations = counter(
            "slorouter.explorations", unit="{request}",
            description="Requests sent to explore a route, by task, risk and model.")
        self.cache = counter("slorouter.cache.lookups", unit="{request}",
                             description="Requests by cache status (hit, miss, bypass, …).")
        self.retries = counter("slorouter.retries", unit="{attempt}",
                               description="Upstream attempts repeating the same deployment.")
        self.fallbacks = counter("slorouter.fallbacks", unit="{attempt}",
                                 description="Upstream attempts moving to another deployment.")
        self.hedges = counter("slorouter.hedges", unit="{attempt}",
                              description="Hedged upstream attempts.")
        self.hedges_skipped = counter(
            "slorouter.hedges.skipped", unit="{attempt}",
            description="Hedges that were due and not sent, by reason: the hedge budget was "
                        "spent, the alternate had its max_in_flight in flight, or its circuit "
                        "was open.")
        self.retries_refused = counter(
            "slorouter.retry_budget.refusals", unit="{attempt}",
            description="Retries and fallbacks that were due after a failure and that the retry "
                        "budget refused: the request ended with the failures before them.")
        self.rejections = counter("slorouter.admission.rejections", unit="{request}",
                                  description="Requests refused by admission control.")
        self.saturated = counter(
            "slorouter.bulkhead.skips", unit="{attempt}",
            description="Attempts not made: the deployment had its max_in_flight in flight.")
        self.cost = counter("slorouter.cost", unit="USD",
                            description="Provider cost of upstream attempts, by deployment: "
                                        "answers priced from usage; estimated: priced from the "
                                        "router's counts (no usage came, or the attempt was sent "
                                        "and cancelled or timed out).")
        self.dropped = counter("slorouter.telemetry.dropped", unit="{outcome}",
                               description="Outcomes dropped because the telemetry queue was full.")

    def record(self, outcome: Outcome) -> None:
        labels = A.metric_labels(outcome, self._deployments)
        if outcome.e2e_s is not None:
            self.request_duration.record(outcome.e2e_s, labels)
        ok = outcome.error_type is None and outcome.status < 400
        # Streams only: a whole answer's first content is the answer itself, so its "TTFT" is
        # its E2E, and mixed in it moved the streams' percentiles.
        if ok and outcome.stream and outcome.ttft_s is not None:
            self.ttft.record(outcome.ttft_s, labels)
        tpot = outcome.tpot_s
        if ok and tpot is not None:
            self.tpot.record(tpot, labels)
        self._record_tokens(outcome, labels)
        self._record_attempts(outcome)
        self._count(outcome)

    def _record_tokens(self, outcome: Outcome, labels: Labels) -> None:
        counts = (("input", outcome.prompt_tokens),
                  ("output", outcome.reported_completion_tokens))
        for kind, count in counts:
            if count is not None:
                self.token_usage.record(count, {**labels, A.TOKEN_TYPE: kind})

    def _record_attempts(self, outcome: Outcome) -> None:
        attempts = outcome.attempts
        for index, attempt in enumerate(attempts):
            if not A.made(attempt):
                if attempt.error is not None and attempt.error.code == SATURATED:
                    self.saturated.add(1, {A.DEPLOYMENT: attempt.deployment})
                if attempt.kind == "hedge":
                    self.hedges_skipped.add(1, {A.DEPLOYMENT: attempt.deployment,
                                                REASON: A.hedge_skip_reason(attempt)})
                elif attempt.refused_by_retry_budget:
                    self.retries_refused.add(1, {A.DEPLOYMENT: attempt.deployment,
                                                 A.ATTEMPT_KIND: attempt.kind})
                continue
            ended = attempt.ended_at if attempt.ended_at is not None else outcome.ended_at
            info = self._deployments.get(attempt.deployment)
            labels: dict[str, AttrValue] = {
                A.OPERATION: "chat",
                A.PROVIDER: A.provider_name(info.provider) if info is not None else "unknown",
                A.REQUEST_MODEL: info.upstream_model if info is not None else "unknown"}
            A.put_if(labels, A.ERROR_TYPE, A.attempt_error_type(attempt))
            if attempt.cost_usd is not None:  # by the deployment that may bill it
                self.cost.add(attempt.cost_usd, {
                    A.DEPLOYMENT: attempt.deployment,
                    A.COST_ESTIMATED: "true" if attempt.cost_estimated else "false"})
            if ended is not None:
                self.operation_duration.record(max(0.0, ended - attempt.started_at), labels)
            kind = A.attempt_kind(attempts, index)
            by_deployment = {A.DEPLOYMENT: attempt.deployment}
            if kind == "retry":
                self.retries.add(1, by_deployment)
            elif kind == "fallback":
                self.fallbacks.add(1, by_deployment)
            elif kind == "hedge":
                self.hedges.add(1, by_deployment)

    def _count(self, outcome: Outcome) -> None:
        # Decisions, probes and cache lookups count routed requests only: a request refused or
        # replayed by the idempotency store after its decision was made never used the route,
        # and a request no model could take had no route to count.
        if outcome.routed and outcome.model:
            route: dict[str, AttrValue] = {A.MODEL: outcome.model}
            A.put_if(route, A.TASK, outcome.task)
            A.put_if(route, A.RISK, outcome.risk)
            self.decisions.add(1, route)
            if outcome.explored:
                self.explorations.add(1, route)
            self.cache.add(1, {A.CACHE: outcome.cache})
        # By what refused it, not by its code: an upstream's error may carry the same code.
        if outcome.refused_by_admission and outcome.error_code is not None:
            self.count_rejection(outcome.error_code)

    def count_rejection(self, reason: str) -> None:
        """For the admission controller, when it refuses before an outcome exists."""
        self.rejections.add(1, {REASON: reason})

    def register_gauge(self, name: str, callback: GaugeCallback, description: str = "",
                       unit: str = "1") -> None:
        """Export state kept elsewhere; `callback` returns (value, labels) pairs when collected."""
        self.registry.gauge(name, callback, unit=unit, description=description)
