"""A background pass that rides on activity instead of a timer.

The statistics refresher and the SLO refresher both want the same thing: run soon after
something changed, at most once per spacing interval, and never wake an idle process. The
writer calls `notify()` on every change (cheap: one comparison unless the pass is due); the
background task loops on `await wait()` and runs its pass after each return. A change that
comes before the interval is over does not wake it; the next change after that does.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable


class SpacedWakeup:
    """Wakes one waiting task at the first `notify()` at least `spacing_s` after the last wake."""

    def __init__(self, spacing_s: float, clock: Callable[[], float]) -> None:
        self._spacing_s = spacing_s
        self._clock = clock
        self._parked: asyncio.Event | None = None  # set by the next due change
        self._due = -math.inf  # clock time from which a change wakes the waiter

    def notify(self) -> None:
        """Something changed: wake the waiter if it is parked and its pass is due."""
        if self._parked is not None and self._clock() >= self._due:
            self._parked.set()

    async def wait(self) -> float:
        """Park until a due change; returns the clock time of the wake, from which the next
        pass is spaced."""
        self._parked = asyncio.Event()
        try:
            await self._parked.wait()
        finally:
            self._parked = None
        now = self._clock()
        self._due = now + self._spacing_s
        return now
