"""One-sided anytime-valid tests (mixture martingales) for the guardrails.

Each function returns the log of a test martingale ("e-process") M_n for a one-sided null, with
M_0 = 1. Under the null M is a non-negative supermartingale, so by Ville's inequality
P(M_n ≥ 1/α for some n, ever) ≤ α: the test may be looked at after every value, for as long
as the experiment runs, and still falsely rejects with probability at most α. Mixing the
likelihood ratio over the alternatives gives a closed form on sufficient statistics (Robbins,
"Statistical methods related to the law of the iterated logarithm", Ann. Math. Statist. 1970;
Howard, Ramdas, McAuliffe, Sekhon, "Time-uniform, nonparametric, nonasymptotic confidence
sequences", Ann. Statist. 2021, §3 and the beta-binomial boundary of their Prop. 7).

- `bernoulli_log_e`: H0 "share ≤ p0" against "share > p0", the binomial likelihood ratio
  mixed over a Beta prior truncated to (p0, 1). Every component's ratio is a supermartingale
  under any share ≤ p0 (not only at p0), so the whole composite null is covered. Exact: no
  normal approximation, valid from the first value.
- `mean_log_e`: H0 "mean ≤ mu0" for a continuous value, the normal likelihood ratio mixed over a
  half-normal prior on the standardised effect, with the sample variance plugged in (as the
  mSPRT of `sequential.py`: asymptotically valid, poor for a few values, hence `min_sample`).

Vectorised with numpy/scipy over any number of tests at once (a guardrail pass evaluates a
handful, a simulation thousands).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.special import betainc, betaln, log_ndtr

FloatArray = npt.NDArray[np.float64]

# Beta prior of the share under the alternative: mean p0 and this many pseudo-values before
# truncation to (p0, 1), so most of its mass sits within a few standard errors above p0 (the
# breaches a guardrail must see early) while large breaches still get overwhelming evidence.
BETA_PRIOR_VALUES = 20.0
# Half-normal prior sd of the standardised effect (mean - mu0) / sd for continuous values.
MEAN_PRIOR_SD = 0.3


def bernoulli_log_e(
    successes: npt.ArrayLike, n: npt.ArrayLike, p0: float,
    prior_values: float = BETA_PRIOR_VALUES,
) -> FloatArray:
    """log M for H0: share ≤ `p0`, after `successes` of `n` values (element-wise).

    M = ∫_{p0}^1 (p/p0)^S ((1-p)/(1-p0))^(n-S) dπ(p), π = Beta(c p0, c (1-p0)) on (p0, 1):
    a ratio of incomplete beta functions. `p0` ≤ 0: any success is infinite evidence;
    `p0` ≥ 1: no evidence ever.
    """
    s = np.asarray(successes, dtype=np.float64)
    f = np.asarray(n, dtype=np.float64) - s
    if p0 <= 0.0:
        return np.where(s > 0, np.inf, 0.0)
    if p0 >= 1.0:
        return np.full(np.broadcast(s, f).shape, -np.inf)
    a, b = prior_values * p0, prior_values * (1.0 - p0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # P(p > p0) under Beta(x, y) is I_{1-p0}(y, x) (regularised incomplete beta).
        log_tail = np.log(betainc(b + f, a + s, 1.0 - p0))
        prior_tail = float(np.log(betainc(b, a, 1.0 - p0)))
        return np.asarray(
            betaln(a + s, b + f) - betaln(a, b) + log_tail - prior_tail
            - s * np.log(p0) - f * np.log1p(-p0),
            dtype=np.float64,
        )


def mean_log_e(
    n: npt.ArrayLike, mean: npt.ArrayLike, variance: npt.ArrayLike, mu0: float,
    prior_sd: float = MEAN_PRIOR_SD,
) -> FloatArray:
    """log M for H0: mean ≤ `mu0` (element-wise; -inf where the variance is 0 or unknown).

    With z = √n (mean - mu0)/sd and the standardised effect δ ~ N(0, k²) restricted to δ > 0:
    M = 2/√(1+nk²) · exp(n k² z² / (2 (1+nk²))) · Φ(k √n z / √(1+nk²)).
    """
    size = np.asarray(n, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.sqrt(size) * (np.asarray(mean, dtype=np.float64) - mu0) / np.sqrt(var)
        spread = 1.0 + size * prior_sd * prior_sd
        log_m = (np.log(2.0) - 0.5 * np.log(spread)
                 + size * prior_sd * prior_sd * z * z / (2.0 * spread)
                 + log_ndtr(prior_sd * np.sqrt(size) * z / np.sqrt(spread)))
    informative = np.isfinite(log_m) & (var > 0)
    return np.where(informative, log_m, -np.inf).astype(np.float64)
