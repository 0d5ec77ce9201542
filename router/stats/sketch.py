"""A time-decayed, mergeable quantile sketch in the manner of DDSketch.

Values are mapped to logarithmic buckets `i = ceil(log_gamma(x))` with
`gamma = (1 + alpha) / (1 - alpha)`; a bucket answers `2 * gamma**i / (gamma + 1)`, which is
within relative error `alpha` of every value in it (Masson, Rim and Lee, "DDSketch", VLDB 2019).
Weights decay exponentially on a half-life by forward decay (see `decay.py`): adding costs one
dict update, quantiles and CDF values are time-invariant (all weights decay alike) and only
`count(now)` depends on time. Values below `min_value` (and zero) go to a zero bucket.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate

from router.stats.decay import PRUNE_FRACTION, RESCALE_EXPONENT, Decay

DEFAULT_ALPHA = 0.01
DEFAULT_MIN_VALUE = 1e-6


class DecayedSketch:
    """Decayed log-bucket quantile sketch: `add(value, t)`, `quantile(q)`, `count(t)`, `merge`."""

    __slots__ = ("_bins", "_decay", "_gamma", "_landmark", "_log_gamma", "_min_value", "_total",
                 "_zero", "alpha")

    def __init__(
        self,
        decay: Decay,
        alpha: float = DEFAULT_ALPHA,
        min_value: float = DEFAULT_MIN_VALUE,
        landmark: float | None = None,
    ) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError("alpha must be in (0, 1)")
        self.alpha = alpha
        self._decay = decay
        self._gamma = (1.0 + alpha) / (1.0 - alpha)
        self._log_gamma = math.log(self._gamma)
        self._min_value = min_value
        self._landmark = landmark
        self._bins: dict[int, float] = {}
        self._zero = 0.0
        self._total = 0.0

    @property
    def decay(self) -> Decay:
        return self._decay

    def _scale_for(self, t: float) -> float:
        if self._landmark is None:
            self._landmark = t
        exponent = self._decay.rate * (t - self._landmark)
        if exponent > RESCALE_EXPONENT:
            self.rebase(t)
            exponent = 0.0
        return math.exp(exponent)

    def add(self, value: float, t: float, weight: float = 1.0) -> None:
        """Add `value` observed at time `t` with `weight`."""
        w = weight * self._scale_for(t)
        self._total += w
        if value < self._min_value:
            self._zero += w
            return
        key = math.ceil(math.log(value) / self._log_gamma)
        self._bins[key] = self._bins.get(key, 0.0) + w

    def count(self, now: float) -> float:
        """The decayed total weight at time `now`."""
        if self._landmark is None:
            return 0.0
        return self._total * self._decay.factor(now - self._landmark)

    def is_empty(self) -> bool:
        return self._total <= 0.0

    def _value(self, key: int) -> float:
        return 2.0 * self._gamma ** key / (self._gamma + 1.0)

    def quantiles(self, qs: Sequence[float]) -> tuple[float, ...] | None:
        """The values at ascending quantiles `qs` (smallest x with CDF(x) >= q), None if empty.

        Cumulative weights in bucket order (the zero bucket first), then a binary search per
        level; only the answers are turned into values. (A summary refresh calls this for
        every sketch of every key read, so the per-bucket work stays in C.)
        """
        if self._total <= 0.0:
            return None
        bins = self._bins
        keys = sorted(bins)
        weights = list(map(bins.__getitem__, keys))
        zero = 1 if self._zero > 0.0 else 0
        if zero:
            weights.insert(0, self._zero)
        cum = list(accumulate(weights))
        last = len(cum) - 1
        out: list[float] = []
        pos = 0
        gamma = self._gamma
        for q in qs:
            target = q * self._total * (1.0 - 1e-12)
            if pos < last:
                pos = bisect_left(cum, target, pos, last)
            out.append(0.0 if pos < zero else 2.0 * gamma ** keys[pos - zero] / (gamma + 1.0))
        return tuple(out)

    def quantile(self, q: float, now: float | None = None) -> float | None:
        """The value at quantile `q` (time-invariant; `now` is accepted for symmetry)."""
        found = self.quantiles((q,))
        return None if found is None else found[0]

    def cdf(self, x: float) -> float | None:
        """The decayed fraction of weight at or below `x`, or None when empty."""
        if self._total <= 0.0:
            return None
        if x < self._min_value:
            return self._zero / self._total
        limit = math.ceil(math.log(x) / self._log_gamma)
        below = self._zero + sum(w for k, w in self._bins.items() if k <= limit)
        return min(below / self._total, 1.0)

    def rebase(self, landmark: float) -> None:
        """Move the landmark (no observable change), pruning negligible buckets."""
        if self._landmark is None:
            self._landmark = landmark
            return
        f = self._decay.factor(landmark - self._landmark)
        floor = self._total * f * PRUNE_FRACTION
        self._bins = {k: w * f for k, w in self._bins.items() if w * f > floor}
        self._zero *= f
        self._total = self._zero + sum(self._bins.values())
        self._landmark = landmark

    def merge(self, other: DecayedSketch) -> None:
        """Add `other` into this sketch (same alpha and half-life)."""
        if other.alpha != self.alpha or other._decay != self._decay:
            raise ValueError("can only merge sketches with the same alpha and half-life")
        if other._landmark is None:
            return
        landmark = self._landmark
        if landmark is None or other._landmark > landmark:
            landmark = other._landmark
            self.rebase(landmark)  # to the later landmark: factors stay at most 1
        f = self._decay.factor(landmark - other._landmark)
        for key, w in other._bins.items():
            self._bins[key] = self._bins.get(key, 0.0) + w * f
        self._zero += other._zero * f
        self._total += other._total * f

    def copy(self) -> DecayedSketch:
        out = DecayedSketch(self._decay, self.alpha, self._min_value, self._landmark)
        out._bins = dict(self._bins)
        out._zero = self._zero
        out._total = self._total
        return out

    def to_state(self) -> tuple[float | None, float, list[int], list[float]]:
        """A plain, serialisable state: (landmark, zero weight, bucket keys, bucket weights)."""
        keys = list(self._bins)
        return self._landmark, self._zero, keys, [self._bins[k] for k in keys]

    @classmethod
    def from_state(
        cls,
        decay: Decay,
        state: tuple[float | None, float, Iterable[int], Iterable[float]],
        alpha: float = DEFAULT_ALPHA,
    ) -> DecayedSketch:
        landmark, zero, keys, weights = state
        out = cls(decay, alpha, landmark=landmark)
        out._bins = {int(k): float(w) for k, w in zip(keys, weights, strict=True)}
        out._zero = float(zero)
        out._total = out._zero + sum(out._bins.values())
        return out

    def bins(self) -> Mapping[int, float]:
        """The raw bucket weights (landmark-scaled), for tests and codecs."""
        return self._bins
