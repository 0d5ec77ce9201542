"""State kept elsewhere, exported as telemetry gauges: breaker states, SLO attainment/burn, the
result cache's and the providers' prompt caches' counters, the age of the eval evidence, and the
admission pools' occupancy.

Callbacks run only when metrics are collected (`GET /metrics` or an OTLP export), never on the
request path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from cache.metrics import CacheMetrics
from policies.eval_report import QualityTable
from router.admission import AdmissionController
from router.execution.breaker import BreakerRegistry
from router.slo import SloTracker
from router.telemetry.metrics import (
    ADMISSION_LIMIT,
    ADMISSION_MEAN_HOLD,
    ADMISSION_REQUESTS,
    ADMISSION_TENANTS,
    BREAKER_STATE,
    EVAL_RESULT_AGE,
    SLO_ATTAINMENT,
    SLO_BURN_RATE,
    RouterMetrics,
)

_STATE_VALUE = {"closed": 0.0, "half_open": 1.0, "open": 2.0}
Labels = dict[str, str]
PRIORITY = "slorouter.priority"


def register_cache(metrics: RouterMetrics, cache: CacheMetrics) -> None:
    """The result cache's counters (cumulative since start), by kind and reason."""

    def counts() -> Iterable[tuple[float, Labels]]:
        snap = cache.snapshot()
        yield float(snap.hits), {"kind": "hit"}
        yield float(snap.misses), {"kind": "miss"}
        yield float(snap.stale_hits), {"kind": "stale"}
        yield float(snap.expired), {"kind": "expired"}
        yield float(snap.writes), {"kind": "write"}
        yield float(snap.coalesced), {"kind": "coalesced"}
        for reason, count in snap.bypasses.items():
            yield float(count), {"kind": "bypass", "reason": reason}
        for reason, count in snap.writes_rejected.items():
            yield float(count), {"kind": "write_rejected", "reason": reason}
        for backend, count in snap.backend_errors.items():
            yield float(count), {"kind": "backend_error", "reason": backend}

    def saved() -> Iterable[tuple[float, Labels]]:
        snap = cache.snapshot()
        yield snap.time_saved_s, {"kind": "result_hits"}
        yield snap.ttft_saved_s, {"kind": "prefix_ttft"}

    def prompt_cache_answers() -> Iterable[tuple[float, Labels]]:
        snap = cache.snapshot()
        yield float(snap.prefix_hits), {"cached": "yes"}
        yield float(snap.prefix_requests - snap.prefix_hits), {"cached": "no"}

    def prompt_cache_tokens() -> Iterable[tuple[float, Labels]]:
        yield float(cache.snapshot().prefix_cached_tokens), {}

    metrics.register_gauge("slorouter.cache.events", counts, "result-cache events since start")
    metrics.register_gauge("slorouter.cache.time_saved", saved, "seconds saved by the cache",
                           unit="s")
    metrics.register_gauge("slorouter.prompt_cache.answers", prompt_cache_answers,
                           "provider answers whose usage was read since start, by whether they "
                           "read prompt tokens from the provider's prompt cache")
    metrics.register_gauge("slorouter.prompt_cache.cached_tokens", prompt_cache_tokens,
                           "prompt tokens providers read from their prompt caches since start",
                           unit="{token}")


def register(metrics: RouterMetrics, breakers: BreakerRegistry, slo: SloTracker) -> None:
    def breaker_states() -> Iterable[tuple[float, Labels]]:
        for deployment in breakers.snapshot().deployments:
            yield _STATE_VALUE.get(deployment.state, 0.0), {"deployment": deployment.deployment}

    def attainment() -> Iterable[tuple[float, Labels]]:
        for task in slo.snapshot(deployments=False).tasks:
            for window in task.windows:
                for sli in window.slis:
                    if sli.attainment is not None:
                        yield sli.attainment, {"task": task.task, "objective": sli.sli,
                                               "window": f"{window.window_s:g}s"}

    def burn() -> Iterable[tuple[float, Labels]]:
        for task in slo.snapshot(deployments=False).tasks:
            for window in task.windows:
                for sli in window.slis:
                    if sli.burn_rate is not None:
                        yield sli.burn_rate, {"task": task.task, "objective": sli.sli,
                                              "window": f"{window.window_s:g}s"}

    metrics.register_gauge(BREAKER_STATE, breaker_states, "0 closed, 1 half-open, 2 open")
    metrics.register_gauge(SLO_ATTAINMENT, attainment, "share of good events per SLI")
    metrics.register_gauge(SLO_BURN_RATE, burn, "error-budget burn rate per SLI and window")


def register_evals(metrics: RouterMetrics, quality: QualityTable,
                   now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
    """The age of each eval result that backs quality floors (its report's `created`), so that
    evidence going stale while the router runs can be alerted on: the optional maximum age
    (`policies.eval_report_max_age_days`) is judged at start-up, and a floor losing its backing
    at an arbitrary moment would turn its model away from the task mid-run."""

    def ages() -> Iterable[tuple[float, Labels]]:
        at = now()
        for key, created in quality.created.items():
            if key in quality.results:
                model, task, metric = key
                yield (at - created).total_seconds(), {"model": model, "task": task,
                                                       "metric": metric}

    metrics.register_gauge(EVAL_RESULT_AGE, ages, "age of each eval result backing a quality "
                           "floor (now less its report's created time)", unit="s")


def register_admission(metrics: RouterMetrics, admission: AdmissionController) -> None:
    """Each priority class's requests running and queued, beside its limits (so that a pool
    filling up, or a queue growing, can be seen and alerted on before it refuses), the tenants
    holding requests in it (its fair share is capacity over them) and the moving average of how
    long a request holds a slot (what `Retry-After` is estimated from). Read from the pools'
    snapshots when collected: nothing is added to a request's path."""

    def requests() -> Iterable[tuple[float, Labels]]:
        for priority, pool in admission.snapshot().items():
            yield float(pool.active), {PRIORITY: priority, "state": "running"}
            yield float(pool.queued), {PRIORITY: priority, "state": "queued"}

    def limits() -> Iterable[tuple[float, Labels]]:
        for priority, limit in admission.policy.pools.items():
            yield float(limit.max_concurrency), {PRIORITY: priority, "state": "running"}
            yield float(limit.max_queue), {PRIORITY: priority, "state": "queued"}

    def tenants() -> Iterable[tuple[float, Labels]]:
        for priority, pool in admission.snapshot().items():
            yield float(pool.tenants), {PRIORITY: priority}

    def mean_hold() -> Iterable[tuple[float, Labels]]:
        for priority, pool in admission.snapshot().items():
            yield pool.mean_hold_s, {PRIORITY: priority}

    metrics.register_gauge(ADMISSION_REQUESTS, requests, "Requests holding an admission slot "
                           "(running) or waiting for one (queued), by priority class.",
                           unit="{request}")
    metrics.register_gauge(ADMISSION_LIMIT, limits, "The class's max_concurrency (running) and "
                           "max_queue (queued): what slorouter.admission.requests fills.",
                           unit="{request}")
    metrics.register_gauge(ADMISSION_TENANTS, tenants, "Tenants with requests running or queued "
                           "in the class (its fair share is its capacity over them).",
                           unit="{tenant}")
    metrics.register_gauge(ADMISSION_MEAN_HOLD, mean_hold, "Moving average of how long a "
                           "request holds a slot of the class (what Retry-After is estimated "
                           "from); not a latency percentile.", unit="s")
