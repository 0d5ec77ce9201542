"""Exponential time decay by forward decay, and decayed named sums.

Forward decay (Cormode et al., 2009): an item added at time `t` is stored with weight
`exp(lam * (t - L))` for a landmark `L`; its value at time `now` is that times
`exp(-lam * (now - L))`. Adding is O(1) (nothing is touched but the item's own slot), every stored
weight decays by the same factor, so ratios (error rates, quantiles, regression coefficients)
never change with the passage of time alone, and two states merge by rescaling to a common
landmark. `lam = ln 2 / half_life`: one half-life halves every weight. The landmark moves forward
when the exponent grows large, to keep floats finite. Sketches live in `sketch.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# Move the landmark forward when the forward-decay exponent exceeds this (e^60 ~ 1e26).
RESCALE_EXPONENT = 60.0
# Drop entries whose decayed weight falls below this fraction of the largest one.
PRUNE_FRACTION = 1e-12
# `math.exp` overflows past ~709.8: a factor is never larger than e^this.
_MAX_EXPONENT = 693.0


@dataclass(frozen=True, slots=True)
class Decay:
    """An exponential decay with a half-life in seconds."""

    half_life_s: float
    # The decay rate `lam = ln 2 / half_life` per second (computed once: every add reads it).
    rate: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.half_life_s > 0:
            raise ValueError("half_life_s must be positive")
        object.__setattr__(self, "rate", math.log(2.0) / self.half_life_s)

    def factor(self, dt: float) -> float:
        """The weight left after `dt` seconds: `2 ** (-dt / half_life)` (a negative `dt`, a
        landmark ahead of the clock, grows it; held finite: 2 ** 1,000 at most)."""
        exponent = -self.rate * dt
        return math.exp(exponent if exponent < _MAX_EXPONENT else _MAX_EXPONENT)


class DecayedSums:
    """Named sums of weighted values, decayed in time, mergeable.

    `add({"ok": 1.0}, t)` adds to the named sums as of time `t`; `value(name, now)` is the
    decayed sum at `now`; `ratio(a, b)` is time-invariant.
    """

    __slots__ = ("_decay", "_landmark", "_sums")

    def __init__(self, decay: Decay, landmark: float | None = None) -> None:
        self._decay = decay
        self._landmark = landmark
        self._sums: dict[str, float] = {}

    @property
    def decay(self) -> Decay:
        return self._decay

    @property
    def landmark(self) -> float | None:
        return self._landmark

    def _scale_for(self, t: float) -> float:
        if self._landmark is None:
            self._landmark = t
        exponent = self._decay.rate * (t - self._landmark)
        if exponent > RESCALE_EXPONENT:
            self.rebase(t)
            exponent = 0.0
        return math.exp(exponent)

    def add(self, values: Mapping[str, float], t: float) -> None:
        """Add each named value as observed at time `t`."""
        scale = self._scale_for(t)
        sums = self._sums
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + value * scale

    def raw(self, name: str) -> float:
        """The stored (landmark-scaled) sum; only ratios of raw sums are meaningful."""
        return self._sums.get(name, 0.0)

    def value(self, name: str, now: float) -> float:
        """The decayed sum at time `now`."""
        if self._landmark is None:
            return 0.0
        return self._sums.get(name, 0.0) * self._decay.factor(now - self._landmark)

    def names(self) -> tuple[str, ...]:
        return tuple(self._sums)

    def rebase(self, landmark: float) -> None:
        """Move the landmark (no observable change), pruning negligible sums."""
        if self._landmark is None:
            self._landmark = landmark
            return
        factor = self._decay.factor(landmark - self._landmark)
        self._sums = {k: v * factor for k, v in self._sums.items()}
        top = max((abs(v) for v in self._sums.values()), default=0.0)
        self._sums = {k: v for k, v in self._sums.items() if abs(v) > top * PRUNE_FRACTION}
        self._landmark = landmark

    def merge(self, other: DecayedSums) -> None:
        """Add `other` into this one (both must share the same half-life)."""
        if other._landmark is None:
            return
        landmark = self._landmark
        if landmark is None or other._landmark > landmark:
            # To the later landmark: every factor stays at most 1 (scaling up to an earlier one
            # overflows once the two are ~1,000 half-lives apart).
            landmark = other._landmark
            self.rebase(landmark)
        factor = self._decay.factor(landmark - other._landmark)
        for name, value in other._sums.items():
            self._sums[name] = self._sums.get(name, 0.0) + value * factor

    def copy(self) -> DecayedSums:
        out = DecayedSums(self._decay, self._landmark)
        out._sums = dict(self._sums)
        return out

    def to_state(self) -> tuple[float | None, dict[str, float]]:
        """A plain, serialisable state: (landmark, raw sums)."""
        return self._landmark, dict(self._sums)

    @classmethod
    def from_state(
        cls, decay: Decay, state: tuple[float | None, Mapping[str, float]]
    ) -> DecayedSums:
        out = cls(decay, state[0])
        out._sums = {str(k): float(v) for k, v in state[1].items()}
        return out
