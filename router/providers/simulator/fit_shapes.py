"""Shapes of measured latencies for `fit_profiles`: quantile tables and KS distances (offline).

The data folder's README calls a Kolmogorov-Smirnov distance of about 0.1 a good fit and 0.2 a
poor one. A lognormal through p50 and p99 reproduces those two numbers and can still be far off
between them (Claude 3 Opus TPOT: 0.43), so the demo profiles carry a table of the measured
sample's quantiles, and the fit records both distances in each profile's `sources`.

Pure functions over plain lists; quantiles are numpy's default (linear between order
statistics), as in the data folder's summaries, so a table's p50 and p99 are the summary's.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence

from router.providers.simulator import quantile_table
from router.providers.simulator.sampling import Lognormal

# 2.5 % steps (41 points, within the 20-50 a profile should carry) plus p99, the point SLO
# targets and the lognormal fields are judged on; p0 and p100 are the sample's extremes.
GRID: tuple[float, ...] = tuple(sorted({round(i / 40, 4) for i in range(41)} | {0.99}))

Cdf = Callable[[float], float]


def linear_quantile(ordered: Sequence[float], p: float) -> float:
    """numpy.percentile's default ('linear') quantile of an ascending sample, `p` in [0, 1]."""
    position = (len(ordered) - 1) * p
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def table_of(sample: Sequence[float], digits: int, grid: Sequence[float] = GRID
             ) -> tuple[tuple[float, float], ...]:
    """The sample's quantiles at `grid`, rounded to `digits` decimals (rounding keeps order)."""
    ordered = sorted(sample)
    return tuple((p, round(linear_quantile(ordered, p), digits)) for p in grid)


def ks_distance(sample: Sequence[float], cdf: Cdf, cdf_below: Cdf | None = None) -> float:
    """Exact sup |F - G| between a model CDF `F` and the sample's empirical CDF `G`.

    Between two sample values `G` is flat and `F` monotone, so the supremum is reached at a
    sample value, on its right (`F(x)` against `G(x)`) or its left (`F(x-)` against `G(x-)`);
    `cdf_below` gives `F(x-)` where `F` has atoms (default: `F` is continuous)."""
    below = cdf_below or cdf
    ordered = sorted(sample)
    n = len(ordered)
    worst = 0.0
    for i, x in enumerate(ordered):
        if i + 1 < n and ordered[i + 1] == x:
            continue  # ties: judge the value once, at its last copy
        first = bisect_left(ordered, x)
        worst = max(worst, abs(cdf(x) - (i + 1) / n), abs(below(x) - first / n))
    return worst


def table_distance(sample: Sequence[float], table: quantile_table.Table) -> float:
    """KS distance of a quantile table's draws to the sample."""
    return ks_distance(sample, lambda x: quantile_table.cdf(table, x),
                       lambda x: quantile_table.cdf_below(table, x))


def _normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def lognormal_cdfs(p50: float, p99: float) -> tuple[Cdf, Cdf]:
    """CDF and left limit of `sampling.draw_quantiles(rng, p50, p99)`'s draws."""
    if p99 <= p50:  # a constant
        return (lambda x: 1.0 if x >= p50 else 0.0), (lambda x: 1.0 if x > p50 else 0.0)
    dist = Lognormal.from_quantiles(p50, p99)
    assert dist is not None  # p50 > 0 here: p99 > p50 >= 0

    def cdf(x: float) -> float:
        return 0.0 if x <= 0 else _normal_cdf((math.log(x) - dist.mu) / dist.sigma)

    return cdf, cdf


def mixture_cdfs(p50: float, p99: float, share: float, tail_p50: float, tail_max: float
                 ) -> tuple[Cdf, Cdf]:
    """CDF and left limit of `sampling.draw_base_ttft_ms` without a table: the body lognormal,
    or with probability `share` the tail lognormal capped at `tail_max` (an atom there)."""
    body, body_below = lognormal_cdfs(p50, p99)
    tail, tail_below = lognormal_cdfs(tail_p50, tail_max)

    def cdf(x: float) -> float:
        return (1 - share) * body(x) + share * (1.0 if x >= tail_max else tail(x))

    def below(x: float) -> float:
        return (1 - share) * body_below(x) + share * (1.0 if x > tail_max else tail_below(x))

    return cdf, below
