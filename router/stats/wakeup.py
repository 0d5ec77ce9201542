"""A background pass that rides on activity instead of a timer, and holds the loop briefly.

The statistics refresher and the SLO refresher both want the same thing: run soon after
something changed, at most once per spacing interval, and never wake an idle process. The
writer calls `notify()` on every change (cheap: one comparison unless the pass is due); the
background task loops on `await wait()` and runs its pass after each return. A change that
comes before the interval is over does not wake it; the next change after that does.

Both passes run on the event loop, so every request in flight waits for them: `Backlog` runs a
pass's keys until `REFRESH_BUDGET_S` is spent and puts the keys it did not reach first in the
next pass, so none is left behind however the budget falls.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

# The longest a background pass holds the event loop. With hundreds of busy keys (10 tasks x 5
# deployments x 4 prompt sizes) a pass would otherwise stall every request for several ms.
REFRESH_BUDGET_S = 0.001

K = TypeVar("K", bound=Hashable)


class Backlog(Generic[K]):
    """The keys a budgeted pass did not reach, to be run first by the next pass."""

    def __init__(self) -> None:
        self.carried: list[K] = []

    def run(self, fresh: Iterable[K], work: Callable[[K], object], clock: Callable[[], float],
            budget_s: float | None) -> int:
        """Call `work` on the carried keys, then on those of `fresh` not among them, until
        `budget_s` has passed by `clock` (no limit when None); returns how many were run."""
        carried, self.carried = self.carried, []
        first = set(carried)
        pending = carried + [key for key in fresh if key not in first]
        started = clock() if budget_s is not None else 0.0
        for done, key in enumerate(pending, 1):
            work(key)
            if budget_s is not None and clock() - started >= budget_s:
                self.carried = pending[done:]
                return done
        return len(pending)


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
