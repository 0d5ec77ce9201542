"""A deployment's verdicts (successes and failures) over a sliding window, each principal's apart.

The bookkeeping behind `breaker_rules.Counts`: the circuit breaker keeps one `Window` of every
verdict and one `PrincipalWindows` per deployment, and so does the statistics' attribution
(`router/stats/attribution.py`). Bounded: a window is `slots` counters, and only the
`max_principals` most recently heard principals are kept apart (one dropped leaves its verdicts
in the deployment's `Window` only, as everyone's). No clock is read here: every call takes
`now`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator

from router.execution.breaker_rules import Counts


class Window:
    """Successes and failures over a sliding window of slotted buckets."""

    def __init__(self, window_s: float, slots: int, now: float) -> None:
        self._width = window_s / slots
        self._ok = [0] * slots
        self._failed = [0] * slots
        self._slot = math.floor(now / self._width)

    def add(self, now: float, failed: bool) -> None:
        self._advance(now)
        bucket = self._failed if failed else self._ok
        bucket[self._slot % len(bucket)] += 1

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, failures) in the window."""
        self._advance(now)
        failures = sum(self._failed)
        return sum(self._ok) + failures, failures

    def clear(self) -> None:
        self._ok = [0] * len(self._ok)
        self._failed = [0] * len(self._failed)

    def remove(self, part: Window, now: float) -> None:
        """Take `part`'s verdicts (a principal's own window, of the same width and slots) out
        of these."""
        # both to the later of their clocks: a verdict recorded late (a request's attempt filed
        # when the request ended) must not pair one ring's slot with the other's 30 s older
        latest = max(now, self._slot * self._width, part._slot * part._width)
        self._advance(latest)
        part._advance(latest)
        for i in range(len(self._ok)):
            self._ok[i] = max(0, self._ok[i] - part._ok[i])
            self._failed[i] = max(0, self._failed[i] - part._failed[i])

    def _advance(self, now: float) -> None:
        now_slot = math.floor(now / self._width)
        for offset in range(1, min(now_slot - self._slot, len(self._ok)) + 1):
            index = (self._slot + offset) % len(self._ok)
            self._ok[index] = 0
            self._failed[index] = 0
        self._slot = max(self._slot, now_slot)


class PrincipalWindows:
    """Each principal's verdicts over the window and failures in the current run (since the
    deployment's last success), for the `max_principals` most recently heard; one it drops
    leaves its verdicts in the deployment's counts only (`breaker_rules.attributed`)."""

    def __init__(self, window_s: float, slots: int, max_principals: int) -> None:
        self._window_s = window_s
        self._slots = slots
        self._max_principals = max_principals
        self._windows: OrderedDict[str, Window] = OrderedDict()
        self._run: dict[str, int] = {}

    def add(self, principal: str, now: float, failed: bool) -> Window | None:
        """Count a verdict of `principal`'s; the window of the principal it dropped to make
        room, if it dropped one."""
        window = self._windows.get(principal)
        dropped_window = None
        if window is None:
            if len(self._windows) >= self._max_principals:
                dropped, dropped_window = self._windows.popitem(last=False)
                self._run.pop(dropped, None)
            window = Window(self._window_s, self._slots, now)
            self._windows[principal] = window
        else:
            self._windows.move_to_end(principal)
        window.add(now, failed)
        if failed:
            self._run[principal] = self._run.get(principal, 0) + 1
        elif self._run:
            self._run.clear()  # a success, whoever's, ends everyone's run
        return dropped_window

    def counts(self, now: float) -> Iterator[tuple[str, Counts]]:
        """Each principal's counts, computed as they are read."""
        for principal, window in self._windows.items():
            yield principal, Counts(self._run.get(principal, 0), *window.counts(now))

    def of(self, principal: str, now: float) -> Counts:
        """One principal's counts (none for a principal not kept apart)."""
        window = self._windows.get(principal)
        if window is None:
            return Counts()
        return Counts(self._run.get(principal, 0), *window.counts(now))

    def clear(self) -> None:
        self._windows.clear()
        self._run.clear()
