"""A frozen summary of a distribution at a few fixed quantile levels, with interpolation.

Summaries are what the decision step reads: computed from a sketch off the hot path, then read
in O(1). `Quantiles.at(q)` interpolates log-linearly between the stored levels (latencies are
roughly log-normal) and clamps outside them. No sketches or clocks live here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

LEVELS: Final[tuple[float, ...]] = (0.5, 0.9, 0.95, 0.99)
LOG_FLOOR: Final = 1e-9

LogQ = tuple[float, float, float, float]


def _log(v: float) -> float:
    return math.log(v if v > LOG_FLOOR else LOG_FLOOR)


@dataclass(frozen=True, slots=True)
class Quantiles:
    """Values at `LEVELS` (p50, p90, p95, p99), non-decreasing, with their logs precomputed."""

    p50: float
    p90: float
    p95: float
    p99: float
    logs: LogQ = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "logs", (_log(self.p50), _log(self.p90), _log(self.p95),
                                          _log(self.p99)))

    @classmethod
    def of_sketch(cls, values: tuple[float, ...] | None) -> Quantiles | None:
        """From a sketch's values at `LEVELS` (ascending already), or None without data: one
        call where `of` makes six (a statistics refresh builds a few per key)."""
        if values is None:
            return None
        out = cls.__new__(cls)
        p50, p90, p95, p99 = values
        lo, log, put = LOG_FLOOR, math.log, object.__setattr__
        put(out, "p50", p50)
        put(out, "p90", p90)
        put(out, "p95", p95)
        put(out, "p99", p99)
        put(out, "logs", (log(p50 if p50 > lo else lo), log(p90 if p90 > lo else lo),
                          log(p95 if p95 > lo else lo), log(p99 if p99 > lo else lo)))
        return out

    @classmethod
    def of(cls, values: tuple[float, ...]) -> Quantiles:
        """Build from values at `LEVELS`, forcing them non-decreasing."""
        v = list(values)
        for i in range(1, len(v)):
            v[i] = max(v[i], v[i - 1])
        return cls(v[0], v[1], v[2], v[3])

    def values(self) -> tuple[float, float, float, float]:
        return (self.p50, self.p90, self.p95, self.p99)

    def at(self, q: float) -> float:
        """The value at quantile `q`, interpolated log-linearly between stored levels."""
        vals = self.values()
        if q <= LEVELS[0]:
            return vals[0]
        for i in range(1, len(LEVELS)):
            if q <= LEVELS[i]:
                lo, hi = vals[i - 1], vals[i]
                frac = (q - LEVELS[i - 1]) / (LEVELS[i] - LEVELS[i - 1])
                if lo <= 0.0 or hi <= 0.0:
                    return lo + frac * (hi - lo)
                return math.exp(math.log(lo) + frac * (math.log(hi) - math.log(lo)))
        return vals[-1]

    def scaled(self, factor: float) -> Quantiles:
        """Every value multiplied by `factor`."""
        return Quantiles(self.p50 * factor, self.p90 * factor, self.p95 * factor,
                         self.p99 * factor)


def blend(child: Quantiles | None, parent: Quantiles | None, w_child: float) -> Quantiles | None:
    """Shrink `child` towards `parent` in log space with weight `w_child` in [0, 1]."""
    if child is None:
        return parent
    if parent is None or w_child >= 1.0:
        return child
    w = max(w_child, 0.0)
    out = []
    for c, p in zip(child.values(), parent.values(), strict=True):
        if c > 0.0 and p > 0.0:
            out.append(math.exp(w * math.log(c) + (1.0 - w) * math.log(p)))
        else:
            out.append(w * c + (1.0 - w) * p)
    return Quantiles.of(tuple(out))


def blend_logs(child: LogQ, parent: LogQ, w: float) -> LogQ:
    """Shrink log-quantiles `child` towards `parent` with weight `w` (hot path: no objects)."""
    u = 1.0 - w
    return (w * child[0] + u * parent[0], w * child[1] + u * parent[1],
            w * child[2] + u * parent[2], w * child[3] + u * parent[3])
