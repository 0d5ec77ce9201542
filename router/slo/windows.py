"""Rolling-window event counters: a ring of fixed-width time slots, summed over any window.

Each slot holds, per SLI, the number of events and of bad events. A slot is reused (zeroed) when
time comes back round to it, so memory is fixed (`horizon / resolution` slots) and old data
disappears by itself. No SLO logic lives here.

Summing a 6 h window at 10 s slots scans 2,161 slots (about 65 us for four windows), and the SLO
tracker asks for every key requests read, each second, on the event loop. So the last sums are
kept and kept current: an event in the current slot (or a past one still inside a window) is
added to them as it is counted, and only a new slot (every `resolution_s`) costs a full pass.

Counting runs for every answered request, so it is plain Python on `array` storage: a numpy
call on a row costs ~1 us when warm but 5-10 us when its code has gone cold, as it has when
requests come hundreds of milliseconds apart (three series and six numpy calls each made
counting ~0.1 ms of a request's CPU at 5 req/s). The full pass still sums in numpy, over views
of the same memory (`np.frombuffer`, no copy).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from router.slo.targets import SLIS, Sli

COLUMNS = 2 * len(SLIS)  # (total, bad) per SLI


_ZEROS = array("q", bytes(8 * COLUMNS))


def column(sli: Sli) -> int:
    """The index of `sli`'s total column; its bad column follows."""
    return 2 * SLIS.index(sli)


class RollingCounts:
    """Per-SLI (total, bad) counts in `resolution_s` slots covering `horizon_s`."""

    __slots__ = ("_counts", "_epoch", "_kept", "_slots", "resolution_s")

    def __init__(self, horizon_s: float, resolution_s: float = 10.0) -> None:
        self.resolution_s = resolution_s
        self._slots = math.ceil(horizon_s / resolution_s) + 1
        # Row-major (slot, column) counts, and the slot number each ring position holds.
        self._counts = array("q", bytes(8 * self._slots * COLUMNS))
        self._epoch = array("q", [-1]) * self._slots
        # The last sums: (slot they are as of, the windows, slots per window, sum per window).
        self._kept: tuple[int, tuple[float, ...], list[int], list[list[int]]] | None = None

    def add(self, t: float, deltas: Sequence[int]) -> None:
        """Add one event's (total, bad) per SLI at time `t`."""
        slot = math.floor(t / self.resolution_s)
        i = slot % self._slots
        held = self._epoch[i]
        counts, base = self._counts, i * COLUMNS
        if held != slot:
            if held > slot:  # older than the ring holds: counting it would wipe a newer slot
                return
            counts[base:base + COLUMNS] = _ZEROS
            self._epoch[i] = slot
        added = [(c, d) for c, d in enumerate(deltas) if d]
        for c, d in added:
            counts[base + c] += d
        kept = self._kept
        if kept is not None:
            current, _, lengths, sums = kept
            if slot > current:  # time moved on: the next read sums afresh
                self._kept = None
            else:  # a slot reused here was a ring older, so in no window's sum
                age = current - slot
                for n, total in zip(lengths, sums, strict=True):
                    if age < n:
                        for c, d in added:
                            total[c] += d

    def sums(self, now: float, windows_s: Sequence[float]) -> list[list[int]]:
        """Per window, the summed (total, bad) columns over the last `window` seconds."""
        current = math.floor(now / self.resolution_s)
        windows = tuple(windows_s)
        kept = self._kept
        if kept is None or kept[0] != current or kept[1] != windows:
            lengths = [max(math.ceil(w / self.resolution_s), 1) for w in windows]
            kept = self._kept = (current, windows, lengths, self._scan(current, lengths))
        return [list(total) for total in kept[3]]

    def _scan(self, current: int, lengths: Sequence[int]) -> list[list[int]]:
        epoch = np.frombuffer(self._epoch, dtype=np.int64)
        counts = np.frombuffer(self._counts, dtype=np.int64).reshape(self._slots, COLUMNS)
        age = current - epoch
        valid = (epoch >= 0) & (age >= 0)
        return [counts[valid & (age < n)].sum(axis=0).tolist() for n in lengths]
