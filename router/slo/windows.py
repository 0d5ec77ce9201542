"""Rolling-window event counters: a ring of fixed-width time slots, summed over any window.

Each slot holds, per SLI, the number of events and of bad events. A slot is reused (zeroed) when
time comes back round to it, so memory is fixed (`horizon / resolution` slots) and old data
disappears by itself. No SLO logic lives here.

`TieredCounts` is what the SLO tracker keeps per series: 10 s slots for the windows up to 30
minutes (the rules' short windows and the last minute, which decide how soon a demotion lifts)
and 1 min slots for the longer ones (1 h and 6 h, whose edge moves by a minute where it moved
by 10 s). One 6 h ring of 10 s slots in 64-bit counts held 156 KB per series: a router with 12
deployments serving 11 tasks at five prompt sizes held 792 series, 122 MB; both rings, in
32-bit counts, take 22 KB (`python -m bench.slo_memory`, 2026-12-07).

Summing a 6 h window at 10 s slots scanned 2,161 slots (about 65 us for four windows; the tiers
scan 181 and 361), and the SLO tracker asks for every key requests read, each second, on the
event loop. So the last sums are
kept and kept current: an event in the current slot (or a past one still inside a window) is
added to them as it is counted, and only a new slot (every `resolution_s`) costs a full pass.

Counting runs for every answered request, so it is plain Python on `array` storage: a numpy
call on a row costs ~1 us when warm but 5-10 us when its code has gone cold, as it has when
requests come hundreds of milliseconds apart (three series and six numpy calls each made
counting ~0.1 ms of a request's CPU at 5 req/s). The full pass still sums in numpy, over views
of the same memory (`np.frombuffer`, no copy).
"""

from __future__ import annotations

import functools
import math
from array import array
from collections.abc import Sequence

import numpy as np

from router.slo.targets import SLIS, Sli

COLUMNS = 2 * len(SLIS)  # (total, bad) per SLI


# Counts are 32-bit: a slot would need over 2 billion events of one SLI to overflow.
_ZEROS = array("i", bytes(4 * COLUMNS))
# Windows up to this long are summed over 10 s slots; longer ones over `COARSE_RESOLUTION_S`.
FINE_UP_TO_S = 1800.0
COARSE_RESOLUTION_S = 60.0
# Each ring holds this much past its longest window, so a read whose `now` lags the newest
# event (a refresh pass, a clock read a little before another's event) loses none of its
# window's oldest slots to the ring's reuse: a ring of exactly its window lost them once the
# lag reached two slots (the re-audit of 2026-12-07).
RING_SLACK_S = 60.0


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
        self._counts = array("i", bytes(4 * self._slots * COLUMNS))
        self._epoch = array("q", [-1]) * self._slots
        # The last sums: (slot they are as of, the windows, slots per window, sum per window).
        self._kept: tuple[int, tuple[float, ...], list[int], list[list[int]]] | None = None

    def add(self, t: float, deltas: Sequence[int]) -> None:
        """Add one event's (total, bad) per SLI at time `t`."""
        self.add_nonzero(t, [(c, d) for c, d in enumerate(deltas) if d])

    def add_nonzero(self, t: float, added: Sequence[tuple[int, int]]) -> None:
        """`add` given the event's nonzero deltas as (column, delta)."""
        slot = math.floor(t / self.resolution_s)
        i = slot % self._slots
        held = self._epoch[i]
        counts, base = self._counts, i * COLUMNS
        if held != slot:
            if held > slot:  # older than the ring holds: counting it would wipe a newer slot
                return
            counts[base:base + COLUMNS] = _ZEROS
            self._epoch[i] = slot
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
        counts = np.frombuffer(self._counts, dtype=np.int32).reshape(self._slots, COLUMNS)
        age = current - epoch
        valid = (epoch >= 0) & (age >= 0)
        return [counts[valid & (age < n)].sum(axis=0).tolist() for n in lengths]

    @property
    def nbytes(self) -> int:
        """The bytes its slots hold (counts and slot numbers)."""
        return (self._counts.itemsize * len(self._counts)
                + self._epoch.itemsize * len(self._epoch))


class TieredCounts:
    """`RollingCounts` over `windows_s`: those up to `FINE_UP_TO_S` summed over slots of
    `resolution_s`, longer ones over slots of `COARSE_RESOLUTION_S` (when coarser), each event
    counted in both rings. A window's sum covers its whole slots back from the current one, so
    a long window's oldest edge falls on a minute. Each ring is always summed over all of its
    windows, so the sums it keeps between reads serve every reader (the snapshot's windows and
    the demotion's differ)."""

    __slots__ = ("_coarse", "_coarse_windows", "_fine", "_fine_windows", "_windows")

    def __init__(self, windows_s: Sequence[float], resolution_s: float = 10.0) -> None:
        fine, coarse = _tiers(tuple(windows_s), resolution_s)
        self._fine = RollingCounts(max(fine) + RING_SLACK_S, resolution_s) if fine else None
        self._coarse = (RollingCounts(max(coarse) + RING_SLACK_S, COARSE_RESOLUTION_S)
                        if coarse else None)
        self._fine_windows, self._coarse_windows = fine, coarse
        self._windows = fine + coarse

    def add(self, t: float, deltas: Sequence[int]) -> None:
        """Add one event's (total, bad) per SLI at time `t`."""
        added = [(c, d) for c, d in enumerate(deltas) if d]
        if self._fine is not None:
            self._fine.add_nonzero(t, added)
        if self._coarse is not None:
            self._coarse.add_nonzero(t, added)

    def sums(self, now: float, windows_s: Sequence[float]) -> list[list[int]]:
        """Per window (each one of those it was made for), the summed (total, bad) columns
        over the last `window` seconds."""
        held: list[list[int]] = []
        if self._fine is not None:
            held += self._fine.sums(now, self._fine_windows)
        if self._coarse is not None:
            held += self._coarse.sums(now, self._coarse_windows)
        windows = tuple(windows_s)
        if windows == self._windows:
            return held
        return [list(held[i]) for i in _positions(self._windows, windows)]

    @property
    def nbytes(self) -> int:
        """The bytes both rings' slots hold."""
        return sum(ring.nbytes for ring in (self._fine, self._coarse) if ring is not None)


@functools.lru_cache(maxsize=64)
def _tiers(windows: tuple[float, ...],
           resolution_s: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The windows summed over the fine ring and those over the coarse one, each in order
    (shared by every series made for the same windows)."""
    ordered = tuple(sorted(set(windows)))
    if resolution_s >= COARSE_RESOLUTION_S:  # nothing to gain from a second ring
        return ordered, ()
    return (tuple(w for w in ordered if w <= FINE_UP_TO_S),
            tuple(w for w in ordered if w > FINE_UP_TO_S))


@functools.lru_cache(maxsize=64)
def _positions(held: tuple[float, ...], asked: tuple[float, ...]) -> tuple[int, ...]:
    """Where each asked window's sums are among those held (ValueError for one not held)."""
    for window in asked:
        if window not in held:
            raise ValueError(f"window {window:g} s is not one of {held}")
    return tuple(held.index(w) for w in asked)
