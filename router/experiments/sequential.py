"""An always-valid two-sample test: the mixture sequential probability ratio test (mSPRT).

For arm minus control, with estimate `d = mean_arm - mean_control` and its variance
`v = s²_arm/n_arm + s²_control/n_control`, the normal-mixture likelihood ratio against
H0: difference = 0, with mixing distribution N(0, τ²), is (Johari et al., "Always valid
inference", 2017/2022, written in terms of v to allow unequal arms)

    Λ = sqrt(v / (v + τ²)) · exp(τ² d² / (2 v (v + τ²)))

Under H0, Λ is (asymptotically) a non-negative martingale, so by Ville's inequality
P(Λ ever ≥ 1/α) ≤ α: the test may be checked after every request without inflating the false-
positive rate. Inverting it gives a confidence sequence, `d ± sqrt(v (v+τ²)/τ² · (2 log(1/α) +
log((v+τ²)/v)))`, and the always-valid p-value is the running minimum of `1/Λ`. τ is set in
standardised units, `τ = mixture_sd · pooled sd`. Latencies are tested on the log scale
(see `outcomes.analysis_value`), so their estimate is a log ratio of geometric means.
Everything is vectorised with numpy so simulations can evaluate thousands of checks at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from router.experiments.outcomes import MetricSamples

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class MsprtArrays:
    """Element-wise results of `msprt_arrays` (nan where there is no information yet)."""

    estimate: FloatArray
    log_lr: FloatArray
    half_width: FloatArray


@dataclass(frozen=True, slots=True)
class SequentialResult:
    """The mSPRT of one metric, arm against control, at the time of the snapshot."""

    arm: str
    metric: str
    n_control: int
    n_arm: int
    estimate: float
    low: float
    high: float
    p_value: float
    alpha: float
    ready: bool
    reject: bool


def msprt_arrays(
    n_control: npt.ArrayLike,
    mean_control: npt.ArrayLike,
    var_control: npt.ArrayLike,
    n_arm: npt.ArrayLike,
    mean_arm: npt.ArrayLike,
    var_arm: npt.ArrayLike,
    *,
    alpha: float,
    mixture_sd: float,
) -> MsprtArrays:
    """Estimate, log Λ and confidence-sequence half-width, element-wise over broadcast inputs."""
    nc, na = np.asarray(n_control, dtype=float), np.asarray(n_arm, dtype=float)
    vc, va = np.asarray(var_control, dtype=float), np.asarray(var_arm, dtype=float)
    estimate = np.asarray(mean_arm, dtype=float) - np.asarray(mean_control, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = ((nc - 1.0) * vc + (na - 1.0) * va) / (nc + na - 2.0)
        # The larger of the unequal-variance (Welch) and the pooled variance of the difference:
        # with each arm's own alone, a small arm that has seen no error yet (variance 0) read
        # as certain, and an A/A test with a 20% arm rejected 12% of the time at α = 5%.
        v = np.maximum(vc / nc + va / na, pooled * (1.0 / nc + 1.0 / na))
        tau2 = mixture_sd**2 * pooled
        informative = np.isfinite(v) & (v > 0) & (tau2 > 0)
        v = np.where(informative, v, np.nan)
        log_lr = 0.5 * np.log(v / (v + tau2)) + tau2 * estimate**2 / (2.0 * v * (v + tau2))
        radius = (v * (v + tau2) / tau2) * (2.0 * math.log(1.0 / alpha) + np.log((v + tau2) / v))
    return MsprtArrays(estimate=estimate, log_lr=log_lr, half_width=np.sqrt(radius))


def msprt(
    control: MetricSamples,
    arm: MetricSamples,
    *,
    arm_name: str,
    metric: str,
    alpha: float,
    mixture_sd: float,
    min_sample: int,
    previous_p: float = 1.0,
) -> SequentialResult:
    """The test on one metric; `previous_p` is the smallest p-value reported so far."""
    out = msprt_arrays(
        control.count, control.mean, control.variance, arm.count, arm.mean, arm.variance,
        alpha=alpha, mixture_sd=mixture_sd,
    )
    estimate, log_lr, half = float(out.estimate), float(out.log_lr), float(out.half_width)
    ready = min(control.count, arm.count) >= min_sample and math.isfinite(log_lr)
    p_now = min(1.0, math.exp(-log_lr)) if ready else 1.0
    p_value = min(p_now, previous_p)
    return SequentialResult(
        arm=arm_name, metric=metric, n_control=control.count, n_arm=arm.count,
        estimate=estimate, low=estimate - half, high=estimate + half,
        p_value=p_value, alpha=alpha, ready=ready, reject=ready and p_value <= alpha,
    )
