"""Retry and hedge budgets: extra upstream calls limited to a share of recent requests.

A budget in the style of Finagle's `RetryBudget` (and tower's `TpsBudget`): every client request
deposits `share` tokens, every extra attempt (a retry, or a hedge for the hedge budget) withdraws
one, and both expire after `window_s`. A reserve of `floor_per_s * window_s` tokens per window
lets a quiet service still retry. Whenever a token is granted, within the sliding window:

    extra attempts <= share * requests + floor_per_s * window_s

so failures cannot multiply load. Over a whole run of `elapsed` seconds since the budget was
created, extra attempts <= share * requests + floor_per_s * (elapsed + window_s) (property-tested):
with share 0.2, upstream calls per request stay <= 1.2 plus the floor's share. The window is
kept in `slots` buckets (memory is O(slots), not O(requests)).

State is local to one process and read with an injected monotonic clock; there is no I/O and no
awaiting. Not thread-safe: use it from one event loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]

_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class BudgetPolicy:
    """How many extra attempts a stream of requests may buy."""

    share: float = 0.2
    floor_per_s: float = 1.0
    window_s: float = 10.0
    slots: int = 10

    def __post_init__(self) -> None:
        if self.share < 0 or self.floor_per_s < 0:
            raise ValueError("share and floor_per_s must be >= 0")
        if self.window_s <= 0 or self.slots < 1:
            raise ValueError("window_s must be > 0 and slots >= 1")


# Measured in bench/chaos_primitives.py: with 30% 5xx on one of two deployments taking half the
# traffic, 15% of requests need a second call; share 0.2 serves all of them (1.15 calls per
# request) where 0.1 leaves ~4% failed. Hedging needs share >= the trigger rate plus headroom.
RETRY_BUDGET_DEFAULTS = BudgetPolicy(share=0.2, floor_per_s=1.0, window_s=10.0)
HEDGE_BUDGET_DEFAULTS = BudgetPolicy(share=0.14, floor_per_s=0.2, window_s=10.0)


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """The budget's window as seen now."""

    requests: int
    spent: int
    available: float


class Budget:
    """A sliding-window token budget for extra attempts (retries or hedges)."""

    def __init__(self, policy: BudgetPolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._width = policy.window_s / policy.slots
        self._requests = [0] * policy.slots
        self._spent = [0] * policy.slots
        self._origin = clock()  # buckets are aligned to creation, so the bound below is exact
        self._slot = 0

    @property
    def policy(self) -> BudgetPolicy:
        return self._policy

    def record_request(self) -> None:
        """Count one client request (call once per request, before its first attempt)."""
        self._advance()
        self._requests[self._slot % self._policy.slots] += 1

    def try_spend(self) -> bool:
        """Take one token for an extra attempt; `False` (and nothing taken) when empty."""
        self._advance()
        if self._available() < 1.0 - _EPSILON:
            return False
        self._spent[self._slot % self._policy.slots] += 1
        return True

    def snapshot(self) -> BudgetSnapshot:
        """Requests, spent tokens and available tokens in the current window."""
        self._advance()
        return BudgetSnapshot(
            requests=sum(self._requests), spent=sum(self._spent), available=self._available()
        )

    def _available(self) -> float:
        reserve = self._policy.floor_per_s * self._policy.window_s
        earned = self._policy.share * sum(self._requests)
        return earned + reserve - sum(self._spent)

    def _slot_at(self, now: float) -> int:
        return math.floor((now - self._origin) / self._width)

    def _advance(self) -> None:
        """Zero the buckets that fell out of the window since the last call."""
        now_slot = self._slot_at(self._clock())
        if now_slot <= self._slot:
            return
        stale = min(now_slot - self._slot, self._policy.slots)
        for offset in range(1, stale + 1):
            index = (self._slot + offset) % self._policy.slots
            self._requests[index] = 0
            self._spent[index] = 0
        self._slot = now_slot


def retry_budget(clock: Clock, policy: BudgetPolicy = RETRY_BUDGET_DEFAULTS) -> Budget:
    """The budget for retries and fallbacks after failures (default 20% + 1/s over 10 s)."""
    return Budget(policy, clock)


def hedge_budget(clock: Clock, policy: BudgetPolicy = HEDGE_BUDGET_DEFAULTS) -> Budget:
    """The budget for hedged attempts (default 14% + 0.2/s over 10 s)."""
    return Budget(policy, clock)
