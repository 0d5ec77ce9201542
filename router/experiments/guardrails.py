"""Guardrail evaluation: which treatment arms must be halted now, and why.

The service looks at every guardrail every 0.5 s for as long as the experiment runs, so each
is an anytime-valid one-sided test (`anytime.py`: a mixture martingale and Ville's
inequality), not a fixed-sample bound looked at thousands of times. An arm at or within its
limit for its whole life is halted with probability at most `1 - confidence` (α) by each
guardrail, however long it runs and however often it is looked at. The tests, per guardrail
and arm (`segments_under_test`):

- one over all the arm's values, at level α/2: sees a sustained breach, however small, as
  evidence accumulates;
- "recent" tests started after every `window // 5` values (the j-th start at level
  α / (2 j (j+1)), so their levels sum to α/2), each read over the values since its start
  while that start lies within the last `window` values, then retired: a breach that starts
  late in an arm's life is judged on the values since it started, not diluted by a long
  healthy history. Their thresholds grow like 2 log j, so late breaches need more evidence.

By the union bound the false-halt probability is ≤ α/2 + Σ α/(2 j (j+1)) = α
("sequential test restarted per window with alpha spending"; Ville's inequality per test).

What each test is about:

- error rate: share of errors ≤ `max_rate` (beta-binomial mixture, `bernoulli_log_e`);
- p95 TTFT/E2E: the p95 exceeds `max_ms` exactly when more than 5% of values exceed it, so
  the share of values above `max_ms` ≤ 0.05 (the same Bernoulli test). Raw latencies are kept
  only for the last `window` values, so the all-values test runs while they hold every value;
- cost per request: mean ≤ `max_usd` (the mixture for nonnegative values,
  `nonnegative_mean_log_e`);
- quality floor: mean ≥ floor, read as each value's shortfall from the top of the metric's
  range, scaled to [0, 1], at most the floor's (`_quality_breach`): the Bernoulli test for a
  binary metric, the nonnegative mixture otherwise.

Every test is exact from the first value; no guardrail fires before the arm has `min_sample`
values (a halt on a handful of values would be valid, but not much use to read). Control is
never halted (it is where halted traffic goes). Pure: the clock is an argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

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
from router.experiments.anytime import bernoulli_log_e, nonnegative_mean_log_e
from router.experiments.outcomes import ArmData, ExperimentData, Halt, MetricSamples

_P95_TAIL = 0.05
RESTARTS_PER_WINDOW = 5
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Segments:
    """The tests a guardrail runs now: each reads the arm's newest `sizes[i]` values and
    fires when its log e-value reaches `log_thresholds[i]` (log 1/level). `whole[i]`: the test
    over all the arm's values."""

    sizes: IntArray
    log_thresholds: FloatArray
    whole: npt.NDArray[np.bool_]


def restart_every(window: int) -> int:
    """Values between the starts of two "recent" tests."""
    return max(1, window // RESTARTS_PER_WINDOW)


def segments_under_test(count: int, available: int, window: int, alpha: float,
                        whole_known: bool) -> Segments:
    """The tests of an arm with `count` values, the newest `available` of them at hand.

    The all-values test (level α/2) runs when `whole_known` (sufficient statistics of every
    value exist) or every value is at hand; the j-th "recent" test starts after value
    j·`restart_every(window)` (level α/(2 j (j+1))) and runs while its start lies within the
    last min(`window`, `available`) values.
    """
    step = restart_every(window)
    reach = min(window, available)
    first = max(1, -(-(count - reach) // step))
    starts = np.arange(first, (count - 1) // step + 1, dtype=np.int64)
    sizes = count - starts * step
    levels = np.log(2.0 / alpha) + np.log(starts * (starts + 1.0))
    whole = whole_known or count <= available
    return Segments(
        sizes=np.concatenate([[count] if whole else [], sizes]).astype(np.int64),
        log_thresholds=np.concatenate([[math.log(2.0 / alpha)] if whole else [], levels]),
        whole=np.asarray([whole] * whole + [False] * sizes.size, dtype=np.bool_),
    )


def _suffix_sums(values: FloatArray, sizes: IntArray) -> FloatArray:
    """Sum of the newest `sizes[i]` of `values` (oldest first), each size <= values.size."""
    running = np.concatenate([[0.0], np.cumsum(values[::-1])])
    return np.asarray(running[np.minimum(sizes, values.size)], dtype=np.float64)


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
class _Fired:
    """The first test (oldest start) that reached its threshold."""

    size: int
    whole: bool
    estimate: float  # the share or mean over the tested values
    log_e: float
    log_threshold: float

    def scope(self) -> str:
        return f"all {self.size} values" if self.whole else f"the last {self.size} values"

    def evidence(self) -> str:
        return (f"always-valid test: e-value {math.exp(min(self.log_e, 700.0)):.3g} >= "
                f"{math.exp(self.log_threshold):.3g}")


def _first_fired(segs: Segments, estimate: FloatArray, log_e: FloatArray) -> _Fired | None:
    fired = np.flatnonzero(log_e >= segs.log_thresholds)
    if fired.size == 0:
        return None
    i = int(fired[0])
    return _Fired(int(segs.sizes[i]), bool(segs.whole[i]), float(estimate[i]),
                  float(log_e[i]), float(segs.log_thresholds[i]))


def _share_test(flags: FloatArray, whole_hits: float, segs: Segments, p0: float
                ) -> _Fired | None:
    """Share of ones above `p0`; `whole_hits`: the ones among all the arm's values."""
    hits = _suffix_sums(flags, segs.sizes)
    hits = np.where(segs.sizes > flags.size, whole_hits, hits)
    n = segs.sizes.astype(np.float64)
    return _first_fired(segs, hits / n, bernoulli_log_e(hits, n, p0))


def _mean_test(values: FloatArray, whole: MetricSamples, segs: Segments, m0: float
               ) -> _Fired | None:
    """Mean of values ≥ 0 above `m0`; `whole`: the sums over all the arm's values."""
    n = segs.sizes.astype(np.float64)
    past = segs.sizes > values.size
    total = np.where(past, whole.total, _suffix_sums(values, segs.sizes))
    total_sq = np.where(past, whole.total_sq, _suffix_sums(values * values, segs.sizes))
    return _first_fired(segs, total / n, nonnegative_mean_log_e(n, total, total_sq, m0))


@dataclass(frozen=True, slots=True)
class _Breach:
    observed: float
    threshold: float
    why: str


def _error_breach(g: ErrorRateGuardrail, values: FloatArray, samples: MetricSamples,
                  segs: Segments) -> _Breach | None:
    fired = _share_test(values, samples.total, segs, g.max_rate)
    if fired is None:
        return None
    return _Breach(fired.estimate, g.max_rate, f"error rate {fired.estimate:.3f} over "
                   f"{fired.scope()} > {g.max_rate:g} ({fired.evidence()})")


def _latency_breach(g: LatencyGuardrail, values: FloatArray, segs: Segments) -> _Breach | None:
    fired = _share_test((values > g.max_ms).astype(np.float64), math.nan, segs, _P95_TAIL)
    if fired is None:
        return None
    observed = float(np.quantile(values[-fired.size:], 1 - _P95_TAIL))
    return _Breach(observed, g.max_ms, f"{g.kind} {observed:.0f} over {fired.scope()} > "
                   f"{g.max_ms:g} ({fired.estimate:.1%} of values above the limit; "
                   f"{fired.evidence()})")


def _cost_breach(g: CostGuardrail, values: FloatArray, samples: MetricSamples,
                 segs: Segments) -> _Breach | None:
    fired = _mean_test(values, samples, segs, g.max_usd)
    if fired is None:
        return None
    return _Breach(fired.estimate, g.max_usd, f"mean cost ${fired.estimate:.6f} over "
                   f"{fired.scope()} > ${g.max_usd:g} ({fired.evidence()})")


def _quality_breach(spec: ExperimentSpec, g: QualityFloorGuardrail, values: FloatArray,
                    samples: MetricSamples, segs: Segments) -> _Breach | None:
    """A floor on a metric within [low, high]: its mean at least the floor is the mean of each
    value's shortfall (high - value) / (high - low), in [0, 1], at most the floor's, p0.
    Binary: the share of zeros (the Bernoulli test, whose likelihood ratio is the most powerful
    there)."""
    declared = spec.metric(g.metric)
    low, high = declared.range if declared is not None else (0.0, 1.0)
    span = high - low
    shortfalls = (high - values) / span
    whole = MetricSamples(count=samples.count, total=(high * samples.count - samples.total) / span,
                          total_sq=(high * high * samples.count - 2.0 * high * samples.total
                                    + samples.total_sq) / (span * span))
    p0 = (high - g.floor) / span
    short = (_share_test(shortfalls, whole.total, segs, p0)
             if declared is None or declared.kind == "binary"
             else _mean_test(shortfalls, whole, segs, p0))
    fired = None if short is None else _Fired(short.size, short.whole,
                                              high - span * short.estimate, short.log_e,
                                              short.log_threshold)
    if fired is None:
        return None
    return _Breach(fired.estimate, g.floor, f"mean {g.metric} {fired.estimate:.3f} over "
                   f"{fired.scope()} < floor {g.floor:g} ({fired.evidence()})")


def _breach(spec: ExperimentSpec, guardrail: Guardrail, values: FloatArray,
            samples: MetricSamples) -> _Breach | None:
    count = max(samples.count, values.size)
    alpha = 1.0 - guardrail.confidence
    if isinstance(guardrail, LatencyGuardrail):
        # Raw latencies exist only for the newest values (the sums are of their logs).
        segs = segments_under_test(count, values.size, guardrail.window, alpha,
                                   whole_known=False)
        return _latency_breach(guardrail, values, segs)
    segs = segments_under_test(count, values.size, guardrail.window, alpha,
                               whole_known=samples.count >= values.size)
    if isinstance(guardrail, ErrorRateGuardrail):
        return _error_breach(guardrail, values, samples, segs)
    if isinstance(guardrail, CostGuardrail):
        return _cost_breach(guardrail, values, samples, segs)
    return _quality_breach(spec, guardrail, values, samples, segs)


def check_guardrail(
    spec: ExperimentSpec, guardrail: Guardrail, arm: ArmData, now: datetime
) -> Halt | None:
    """The halt this guardrail demands for `arm` now, if any."""
    metric = _metric_of(guardrail)
    samples = arm.samples(metric)
    values = _window(arm, metric, guardrail.window)
    if values.size < guardrail.min_sample:
        return None
    found = _breach(spec, guardrail, values, samples)
    if found is None:
        return None
    return Halt(
        arm=arm.arm, guardrail=guardrail.kind, observed=found.observed,
        threshold=found.threshold, reason=found.why, at=now, at_sample=samples.count,
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
