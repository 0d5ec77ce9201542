"""Seconds since the epoch that never step: the clock of statistics, SLO windows and stall ages.

`steady_time()` is the wall clock read once, when this module is imported, advanced by the
monotonic clock since. A wall clock stepped by an NTP correction or by hand (either way) never
reaches what it times: decayed statistics weigh each observation by its age, so a clock stepped
back ten minutes would weigh every new observation as ten minutes old and freeze the estimates
for that long, and one stepped forward would age every in-flight attempt into a stall. Slewing
is followed (CLOCK_MONOTONIC is slewed by NTP as the wall clock is; it is never stepped).

Replicas compare such times through their Redis server's clock, never through each other's
(`router/stats/redis_store.py`): a replica whose clock is off by an hour still shares
statistics at their true age.
"""

from __future__ import annotations

import time

_EPOCH_AT_MONOTONIC_ZERO = time.time() - time.monotonic()


def steady_time() -> float:
    """Seconds since the epoch as of this process's start, advanced by the monotonic clock."""
    return _EPOCH_AT_MONOTONIC_ZERO + time.monotonic()
