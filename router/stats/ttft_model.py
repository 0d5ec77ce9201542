"""Per-deployment TTFT model in prompt tokens: decayed weighted least squares plus residual ratios.

`TTFT ~ a + b * prompt_ktokens` (prefill grows with the prompt), fitted on exponentially decayed
sums so that it follows the provider. The spread around the line is kept as a decayed sketch of
the ratio `observed / fitted` (taken against the fit before each update), so the TTFT at a
percentile is `(a + b * x) * ratio_q`: robust to skewed noise, and a shift in queueing raises
the ratios at once even before the line moves. The slope is constrained non-negative and the
intercept non-negative; observations far above the line are clipped for the fit only.

The line is only known near the prompt sizes it was fitted on (mean +- 2 standard deviations):
a fit on 8k-token prompts alone has slope 0 and says nothing about 16-token prompts. `trust`
tells the scorer how far to believe it at a given size: 1 inside that range, falling linearly in
log distance to 0 at `EXTRAPOLATION_LIMIT` times beyond it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from router.stats.decay import Decay, DecayedSums
from router.stats.quantiles import LEVELS, LogQ, Quantiles
from router.stats.sketch import DecayedSketch

KTOK = 1000.0
CLIP_RATIO = 10.0  # observations above 10x the fitted line are clipped in the regression
MIN_FITTED_S = 1e-4
COVERED_SD = 2.0  # the fit covers mean +- 2 standard deviations of the prompt sizes it saw
EXTRAPOLATION_LIMIT = 4.0  # no trust this many times shorter or longer than the covered range
SOFT_KTOK = 0.25  # sizes are compared as (ktok + 0.25): 16 and 100 tokens are alike
_LOG_LIMIT = math.log(EXTRAPOLATION_LIMIT)


@dataclass(frozen=True, slots=True)
class TtftFit:
    """A read-only fit: intercept (s), slope (s per 1k prompt tokens), weight, ratio quantiles."""

    intercept_s: float
    slope_s_per_ktok: float
    weight: float  # decayed observation weight at `at`
    at: float
    spread_ktok: float  # weighted standard deviation of prompt size, in 1k tokens
    ratio: Quantiles | None
    covers_from_ktok: float = 0.0  # the prompt sizes the line was fitted on (see `trust`)
    covers_to_ktok: float = math.inf

    def trust(self, prompt_tokens: int) -> float:
        """How far the line holds at `prompt_tokens`: 1 within the covered sizes, then
        linearly less in log distance, 0 from `EXTRAPOLATION_LIMIT` times beyond them."""
        x = prompt_tokens / KTOK
        if x < self.covers_from_ktok:
            far = (self.covers_from_ktok + SOFT_KTOK) / (x + SOFT_KTOK)
        elif x > self.covers_to_ktok:
            far = (x + SOFT_KTOK) / (self.covers_to_ktok + SOFT_KTOK)
        else:
            return 1.0
        return max(0.0, 1.0 - math.log(far) / _LOG_LIMIT)

    def mean_s(self, prompt_tokens: int) -> float:
        """The fitted line at `prompt_tokens`."""
        return max(self.intercept_s + self.slope_s_per_ktok * prompt_tokens / KTOK, MIN_FITTED_S)

    def predict(self, prompt_tokens: int) -> Quantiles | None:
        """TTFT quantiles for a prompt of `prompt_tokens`, None before residuals exist."""
        if self.ratio is None:
            return None
        return self.ratio.scaled(self.mean_s(prompt_tokens))

    def predict_logs(self, prompt_tokens: int) -> LogQ | None:
        """Log TTFT quantiles for a prompt of `prompt_tokens` (the scorer's fast path)."""
        if self.ratio is None:
            return None
        shift = math.log(self.mean_s(prompt_tokens))
        r = self.ratio.logs
        return (r[0] + shift, r[1] + shift, r[2] + shift, r[3] + shift)


def _solve(w: float, x: float, y: float, xx: float, xy: float) -> tuple[float, float, float]:
    """Weighted least squares from raw sums: (intercept, slope, spread) with a, b >= 0."""
    mean_x, mean_y = x / w, y / w
    var_x = max(xx / w - mean_x * mean_x, 0.0)
    spread = var_x ** 0.5
    if var_x <= 1e-12:
        return mean_y, 0.0, spread
    slope = (xy / w - mean_x * mean_y) / var_x
    if slope < 0.0:
        return mean_y, 0.0, spread
    intercept = mean_y - slope * mean_x
    if intercept < 0.0:
        return 0.0, xy / xx, spread
    return intercept, slope, spread


class TtftModel:
    """Decayed WLS of TTFT on prompt size, with a decayed sketch of residual ratios."""

    __slots__ = ("_ratio", "_sums")

    def __init__(self, decay: Decay, alpha: float) -> None:
        self._sums = DecayedSums(decay)
        self._ratio = DecayedSketch(decay, alpha)

    @property
    def sums(self) -> DecayedSums:
        return self._sums

    @property
    def ratio(self) -> DecayedSketch:
        return self._ratio

    def _line(self) -> tuple[float, float] | None:
        s = self._sums
        w = s.raw("w")
        if w <= 0.0:
            return None
        a, b, _ = _solve(w, s.raw("x"), s.raw("y"), s.raw("xx"), s.raw("xy"))
        return a, b

    def add(self, prompt_tokens: int, ttft_s: float, t: float) -> None:
        """Record one successful attempt's TTFT."""
        x = prompt_tokens / KTOK
        y = ttft_s
        line = self._line()
        if line is not None:
            fitted = max(line[0] + line[1] * x, MIN_FITTED_S)
            self._ratio.add(ttft_s / fitted, t)
            y = min(ttft_s, fitted * CLIP_RATIO)
        self._sums.add({"w": 1.0, "x": x, "y": y, "xx": x * x, "xy": x * y}, t)

    def merge(self, other: TtftModel) -> None:
        self._sums.merge(other._sums)
        self._ratio.merge(other._ratio)

    def fit(self, now: float) -> TtftFit | None:
        """The current fit, or None when nothing was observed."""
        if self._sums.raw("w") <= 0.0:
            return None
        found = self._ratio.quantiles(LEVELS)
        return self._fit(now, Quantiles.of(found) if found is not None else None)

    def _fit(self, now: float, ratio: Quantiles | None) -> TtftFit:
        s = self._sums
        w = s.raw("w")
        a, b, spread = _solve(w, s.raw("x"), s.raw("y"), s.raw("xx"), s.raw("xy"))
        mean = s.raw("x") / w
        return TtftFit(a, b, s.value("w", now), now, spread, ratio,
                       max(mean - COVERED_SD * spread, 0.0), mean + COVERED_SD * spread)

    def quantiles_at(self, prompt_tokens: int, qs: Sequence[float], now: float,
                     min_trust: float) -> tuple[tuple[float, ...] | None, float]:
        """TTFT at the ascending levels `qs` for a prompt of `prompt_tokens`: the fitted line
        there times the residual ratios at those levels, read from their sketch itself (a level
        between the summaries' fixed ones, a hedge trigger at p88, sees a bimodal tail as it
        is), with the decayed weight of the residuals behind them. None where the line is not
        trusted to `min_trust` at that size (`TtftFit.trust`) or before residuals exist."""
        if self._sums.raw("w") <= 0.0:
            return None, 0.0
        line = self._fit(now, None)
        if line.trust(prompt_tokens) < min_trust:
            return None, 0.0
        ratios = self._ratio.quantiles(qs)
        if ratios is None:
            return None, 0.0
        fitted = line.mean_s(prompt_tokens)
        return tuple(fitted * r for r in ratios), self._ratio.count(now)

    @classmethod
    def from_parts(cls, sums: DecayedSums, ratio: DecayedSketch) -> TtftModel:
        out = cls(sums.decay, ratio.alpha)
        out._sums = sums
        out._ratio = ratio
        return out
