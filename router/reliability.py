"""Reliability parts built from the configuration: admission control and execution state.

One place turns `server.reliability` into the process-wide objects the request path shares:
the admission controller, the breakers, and the retry and hedge budgets.
"""

from __future__ import annotations

import logging
import random
import time

from policies.schema import BudgetSpec, PoolSpec, ReliabilitySpec
from router.admission import AdmissionController, AdmissionPolicy, PoolLimits
from router.execution.backoff import BackoffPolicy
from router.execution.breaker import BreakerPolicy, BreakerRegistry, BreakerState
from router.execution.plan import ExecutionState
from router.execution.retry_budget import Budget, BudgetPolicy
from router.logs import event

log = logging.getLogger(__name__)


def _pool(spec: PoolSpec) -> PoolLimits:
    return PoolLimits(max_concurrency=spec.max_concurrency, max_queue=spec.max_queue,
                      max_queue_wait_s=spec.max_queue_wait_s,
                      max_concurrency_per_tenant=spec.max_concurrency_per_tenant)


def _budget(spec: BudgetSpec) -> Budget:
    return Budget(BudgetPolicy(share=spec.share, floor_per_s=spec.floor_per_s,
                               window_s=spec.window_s), time.monotonic)


def admission_controller(spec: ReliabilitySpec) -> AdmissionController:
    policy = AdmissionPolicy(pools={"interactive": _pool(spec.interactive),
                                    "background": _pool(spec.background)})
    return AdmissionController(policy, time.monotonic)


def log_breaker_change(deployment: str, state: BreakerState, hold_s: float | None,
                       cause: str | None = None) -> None:
    """A circuit opening (warning, with the code of the failure that opened it: a revoked key's
    `upstream_auth` reads apart from an outage's) or closing again (info): an error storm
    otherwise left no line in the log at the default level, only the `slorouter.breaker.state`
    gauge."""
    if state == "open":
        event(log, "breaker_opened", logging.WARNING, deployment=deployment,
              hold_s=None if hold_s is None else round(hold_s, 3), cause=cause)
    else:
        event(log, "breaker_closed", logging.INFO, deployment=deployment)


def execution_state(spec: ReliabilitySpec, rng: random.Random | None = None) -> ExecutionState:
    breaker = spec.breaker
    breakers = BreakerRegistry(BreakerPolicy(
        consecutive_failures=breaker.consecutive_failures, error_rate=breaker.error_rate,
        min_volume=breaker.min_volume, window_s=breaker.window_s,
        cool_down_s=breaker.cool_down_s, half_open_probes=breaker.half_open_probes,
        holds_after=breaker.holds_after, max_hold_s=breaker.max_hold_s),
        time.monotonic, on_change=log_breaker_change)
    return ExecutionState(
        breakers=breakers, retries=_budget(spec.retry_budget), hedges=_budget(spec.hedge_budget),
        backoff=BackoffPolicy(base_s=spec.backoff_base_s, cap_s=spec.backoff_cap_s),
        max_retries_per_deployment=spec.max_retries_per_deployment,
        rng=rng if rng is not None else random.Random())
