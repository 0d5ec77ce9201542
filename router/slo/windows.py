"""Rolling-window event counters: a ring of fixed-width time slots, summed over any window.

Each slot holds, per SLI, the number of events and of bad events. A slot is reused (zeroed) when
time comes back round to it, so memory is fixed (`horizon / resolution` slots) and old data
disappears by itself. No SLO logic lives here.

Summing a 6 h window at 10 s slots scans 2,161 slots (about 65 us for four windows), and the SLO
tracker asks for every key requests read, each second, on the event loop. So the last sums are
kept and kept current: an event in the current slot (or a past one still inside a window) is
added to them as it is counted, and only a new slot (every `resolution_s`) costs a full pass.
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

    __slots__ = ("_counts", "_epoch", "_kept", "_slots", "resolution_s")

    def __init__(self, horizon_s: float, resolution_s: float = 10.0) -> None:
        self.resolution_s = resolution_s
        self._slots = math.ceil(horizon_s / resolution_s) + 1
        self._counts: npt.NDArray[np.int32] = np.zeros((self._slots, COLUMNS), dtype=np.int32)
        self._epoch: npt.NDArray[np.int64] = np.full(self._slots, -1, dtype=np.int64)
        # The last sums: (slot they are as of, the windows, slots per window, sum per window).
        self._kept: tuple[int, tuple[float, ...], list[int], list[npt.NDArray[np.int64]]] | None
        self._kept = None

    def add(self, t: float, deltas: Sequence[int] | npt.NDArray[np.int32]) -> None:
        """Add one event's (total, bad) per SLI at time `t`."""
        slot = math.floor(t / self.resolution_s)
        i = slot % self._slots
        held = self._epoch[i]
        if held != slot:
            if held > slot:  # older than the ring holds: counting it would wipe a newer slot
                return
            self._counts[i] = 0
            self._epoch[i] = slot
        added = np.asarray(deltas, dtype=np.int32)
        self._counts[i] += added
        kept = self._kept
        if kept is not None:
            current, _, lengths, sums = kept
            if slot > current:  # time moved on: the next read sums afresh
                self._kept = None
            else:  # a slot reused here was a ring older, so in no window's sum
                age = current - slot
                for n, total in zip(lengths, sums, strict=True):
                    if age < n:
                        total += added

    def sums(self, now: float, windows_s: Sequence[float]) -> list[list[int]]:
        """Per window, the summed (total, bad) columns over the last `window` seconds."""
        current = math.floor(now / self.resolution_s)
        windows = tuple(windows_s)
        kept = self._kept
        if kept is None or kept[0] != current or kept[1] != windows:
            lengths = [max(math.ceil(w / self.resolution_s), 1) for w in windows]
            kept = self._kept = (current, windows, lengths, self._scan(current, lengths))
        return [total.tolist() for total in kept[3]]

    def _scan(self, current: int, lengths: Sequence[int]) -> list[npt.NDArray[np.int64]]:
        age = current - self._epoch
        valid = (self._epoch >= 0) & (age >= 0)
        return [self._counts[valid & (age < n)].sum(axis=0, dtype=np.int64) for n in lengths]
