"""Guardrail evaluation: which treatment arms must be halted now, and why.

Each guardrail looks at the arm's most recent `window` values of one metric and fires only
once at least `min_sample` of them exist and the breach holds at the guardrail's one-sided
`confidence` (so noise around the threshold does not halt a healthy arm):

- error rate: Wilson lower bound of the error share > `max_rate`;
- p95 TTFT/E2E: the p95 exceeds `max_ms` exactly when more than 5% of values exceed it, so the
  Wilson lower bound of the share of values above `max_ms` must be > 0.05;
- cost per request: normal lower bound of the mean > `max_usd`;
- quality floor: upper bound of the mean (Wilson for binary metrics, normal otherwise) < floor.

Control is never halted (it is where halted traffic goes). Pure: the clock is an argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from policies.experiments.schema import (
    CostGuardrail,
    ErrorRateGuardrail,
    ExperimentSpec,
    Guardrail,
    LatencyGuardrail,
    QualityFloorGuardrail,
)
from router.experiments.outcomes import ArmData, ExperimentData, Halt

_P95_TAIL = 0.05
FloatArray = npt.NDArray[np.float64]


def wilson_bounds(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Wilson score bounds (lower, upper) for a proportion at `confidence`."""
    z = NormalDist().inv_cdf(confidence)
    share = successes / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    spread = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - spread), min(1.0, centre + spread)


def mean_bounds(values: FloatArray, confidence: float) -> tuple[float, float]:
    """One-sided normal bounds (lower, upper) for the mean of `values`."""
    z = NormalDist().inv_cdf(confidence)
    spread = z * float(values.std(ddof=1)) / math.sqrt(values.size) if values.size > 1 else 0.0
    mean = float(values.mean())
    return mean - spread, mean + spread


def _window(arm: ArmData, metric: str, size: int) -> FloatArray:
    recent = arm.samples(metric).recent
    return np.asarray(recent[-size:], dtype=np.float64)


def _metric_of(guardrail: Guardrail) -> str:
    if isinstance(guardrail, QualityFloorGuardrail):
        return guardrail.metric
    if isinstance(guardrail, ErrorRateGuardrail):
        return "error"
    if isinstance(guardrail, CostGuardrail):
        return "cost_usd"
    return "ttft_ms" if guardrail.kind == "p95_ttft_ms" else "e2e_ms"


def guarded_windows(spec: ExperimentSpec) -> dict[str, int]:
    """What the guardrails read: each guarded metric with its largest window (the argument
    of `OutcomeStore.snapshot` for a guardrail pass)."""
    windows: dict[str, int] = {}
    for guardrail in spec.guardrails:
        metric = _metric_of(guardrail)
        windows[metric] = max(windows.get(metric, 0), guardrail.window)
    return windows


@dataclass(frozen=True, slots=True)
class _Breach:
    observed: float
    threshold: float
    why: str


def _error_breach(g: ErrorRateGuardrail, values: FloatArray) -> _Breach | None:
    low, _ = wilson_bounds(int(values.sum()), values.size, g.confidence)
    if low <= g.max_rate:
        return None
    observed = float(values.mean())
    return _Breach(observed, g.max_rate,
                   f"error rate {observed:.3f} (lower bound {low:.3f}) > {g.max_rate:g}")


def _latency_breach(g: LatencyGuardrail, values: FloatArray) -> _Breach | None:
    low, _ = wilson_bounds(int((values > g.max_ms).sum()), values.size, g.confidence)
    if low <= _P95_TAIL:
        return None
    observed = float(np.quantile(values, 1 - _P95_TAIL))
    return _Breach(observed, g.max_ms, f"{g.kind} {observed:.0f} > {g.max_ms:g} "
                   f"(at least {low:.1%} of values above the limit)")


def _cost_breach(g: CostGuardrail, values: FloatArray) -> _Breach | None:
    low, _ = mean_bounds(values, g.confidence)
    if low <= g.max_usd:
        return None
    observed = float(values.mean())
    return _Breach(observed, g.max_usd,
                   f"mean cost ${observed:.6f} (lower bound ${low:.6f}) > ${g.max_usd:g}")


def _quality_breach(
    spec: ExperimentSpec, g: QualityFloorGuardrail, values: FloatArray
) -> _Breach | None:
    declared = spec.metric(g.metric)
    if declared is not None and declared.kind == "binary":
        upper = wilson_bounds(int(values.sum()), values.size, g.confidence)[1]
    else:
        upper = mean_bounds(values, g.confidence)[1]
    if upper >= g.floor:
        return None
    observed = float(values.mean())
    return _Breach(observed, g.floor,
                   f"mean {g.metric} {observed:.3f} (upper bound {upper:.3f}) < floor {g.floor:g}")


def _breach(spec: ExperimentSpec, guardrail: Guardrail, values: FloatArray) -> _Breach | None:
    if isinstance(guardrail, ErrorRateGuardrail):
        return _error_breach(guardrail, values)
    if isinstance(guardrail, LatencyGuardrail):
        return _latency_breach(guardrail, values)
    if isinstance(guardrail, CostGuardrail):
        return _cost_breach(guardrail, values)
    return _quality_breach(spec, guardrail, values)


def check_guardrail(
    spec: ExperimentSpec, guardrail: Guardrail, arm: ArmData, now: datetime
) -> Halt | None:
    """The halt this guardrail demands for `arm` now, if any."""
    metric = _metric_of(guardrail)
    values = _window(arm, metric, guardrail.window)
    if values.size < guardrail.min_sample:
        return None
    found = _breach(spec, guardrail, values)
    if found is None:
        return None
    return Halt(
        arm=arm.arm, guardrail=guardrail.kind, observed=found.observed,
        threshold=found.threshold, reason=f"{found.why} over the last {values.size} values",
        at=now,
        at_sample=arm.samples(metric).count,
    )


def evaluate_guardrails(
    spec: ExperimentSpec, data: ExperimentData, now: datetime
) -> tuple[Halt, ...]:
    """New halts: for each running treatment arm, the first guardrail (in spec order) it breaks."""
    halts: list[Halt] = []
    for arm_spec in spec.treatments:
        if arm_spec.name in data.halted:
            continue
        arm = data.arm(arm_spec.name)
        for guardrail in spec.guardrails:
            halt = check_guardrail(spec, guardrail, arm, now)
            if halt is not None:
                halts.append(halt)
                break
    return tuple(halts)
