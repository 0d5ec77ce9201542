"""The Wilson score interval of a proportion: what `eval run` writes and what report loading
checks a written bound against. A leaf (standard library only) so the router can use it
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
