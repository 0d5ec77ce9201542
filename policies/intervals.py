"""The Wilson score interval of a proportion: what `eval run` writes and what report loading
checks a written bound against; and the margin of a relative quality floor, which the service
and the offline replay both judge by. A leaf (standard library only) so the router can use it
without importing `evals`."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # two-sided 95 %


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (successes may be fractional for [0,1] scores)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # The interval always holds `p`; at p = 0 or 1 rounding can leave a bound a hair past it.
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def relative_floor_margin(mean: float, lower: float, reference_mean: float,
                          reference_upper: float, ratio: float) -> float:
    """How far a model's quality is above `ratio` times its reference's, at 95% (one-sided
    2.5%): each standard error read off its 95% bound on the side that matters (the model's
    `lower`, the reference's `upper`). The floor is met at 0 or above."""
    own_se = max(0.0, mean - lower) / Z95
    reference_se = max(0.0, reference_upper - reference_mean) / Z95
    return (mean - ratio * reference_mean
            - Z95 * math.sqrt(own_se ** 2 + (ratio * reference_se) ** 2))
