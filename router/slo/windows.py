"""Rolling-window event counters: a ring of fixed-width time slots, summed over any window.

Each slot holds, per SLI, the number of events and of bad events. A slot is reused (zeroed) when
time comes back round to it, so memory is fixed (`horizon / resolution` slots) and old data
disappears by itself. Sums over several windows come from one pass. No SLO logic lives here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from router.slo.targets import SLIS, Sli

COLUMNS = 2 * len(SLIS)  # (total, bad) per SLI


def column(sli: Sli) -> int:
    """The index of `sli`'s total column; its bad column follows."""
    return 2 * SLIS.index(sli)


class RollingCounts:
    """Per-SLI (total, bad) counts in `resolution_s` slots covering `horizon_s`."""

    __slots__ = ("_counts", "_epoch", "_slots", "resolution_s")

    def __init__(self, horizon_s: float, resolution_s: float = 10.0) -> None:
        self.resolution_s = resolution_s
        self._slots = math.ceil(horizon_s / resolution_s) + 1
        self._counts: npt.NDArray[np.int32] = np.zeros((self._slots, COLUMNS), dtype=np.int32)
        self._epoch: npt.NDArray[np.int64] = np.full(self._slots, -1, dtype=np.int64)

    def add(self, t: float, deltas: Sequence[int] | npt.NDArray[np.int32]) -> None:
        """Add one event's (total, bad) per SLI at time `t`."""
        slot = math.floor(t / self.resolution_s)
        i = slot % self._slots
        if self._epoch[i] != slot:
            self._counts[i] = 0
            self._epoch[i] = slot
        self._counts[i] += np.asarray(deltas, dtype=np.int32)

    def sums(self, now: float, windows_s: Sequence[float]) -> list[npt.NDArray[np.int64]]:
        """Per window, the summed (total, bad) columns over the last `window` seconds."""
        current = math.floor(now / self.resolution_s)
        age = current - self._epoch
        valid = (self._epoch >= 0) & (age >= 0)
        out = []
        for window in windows_s:
            n = max(math.ceil(window / self.resolution_s), 1)
            mask = valid & (age < n)
            out.append(self._counts[mask].sum(axis=0, dtype=np.int64))
        return out
