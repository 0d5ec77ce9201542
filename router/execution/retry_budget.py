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

Within it each tenant (a request's `principal`) has its own part: `share` times its own
requests in the window plus the reserve split among the tenants with requests in it. Past its
part a tenant borrows from the whole only while at least half of the whole is left, so one
tenant's failing prompts cannot spend what the others need: a tenant sending prompts every
deployment fails left the others' transient 503s unretried (the overload audit of
2026-12-07). Tenants that fail rarely borrow freely, as before (200 tenants of a few requests
each have parts under one token). With one tenant (or none named) this is the budget above.

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


class _Window:
    """Requests and spent tokens in each of the window's slots."""

    __slots__ = ("requests", "spent")

    def __init__(self, slots: int) -> None:
        self.requests = [0] * slots
        self.spent = [0] * slots

    def clear(self, index: int) -> None:
        self.requests[index] = 0
        self.spent[index] = 0

    def empty(self) -> bool:
        return not any(self.requests) and not any(self.spent)


class Budget:
    """A sliding-window token budget for extra attempts (retries or hedges)."""

    def __init__(self, policy: BudgetPolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._width = policy.window_s / policy.slots
        self._all = _Window(policy.slots)
        self._tenants: dict[str, _Window] = {}  # those with requests or tokens in the window
        self._origin = clock()  # buckets are aligned to creation, so the bound below is exact
        self._slot = 0

    @property
    def policy(self) -> BudgetPolicy:
        return self._policy

    def record_request(self, principal: str = "") -> None:
        """Count one client request of `principal` (call once per request, before its first
        attempt)."""
        self._advance()
        index = self._slot % self._policy.slots
        self._all.requests[index] += 1
        own = self._tenants.get(principal)
        if own is None:
            own = self._tenants[principal] = _Window(self._policy.slots)
        own.requests[index] += 1

    def try_spend(self, principal: str = "") -> bool:
        """Take one token for an extra attempt of `principal`; `False` (and nothing taken) when
        the budget, or the tenant's share of it, is empty."""
        self._advance()
        left = self._available(self._all, 1)
        if left < 1.0 - _EPSILON:
            return False
        own = self._tenants.get(principal)
        if (own is not None and self._available(own, len(self._tenants)) < 1.0 - _EPSILON
                and left < self._earned(self._all, 1) / 2):
            return False  # past its own part, with half of the whole spent
        index = self._slot % self._policy.slots
        self._all.spent[index] += 1
        if own is not None:
            own.spent[index] += 1
        return True

    def snapshot(self) -> BudgetSnapshot:
        """Requests, spent tokens and available tokens in the current window."""
        self._advance()
        return BudgetSnapshot(requests=sum(self._all.requests), spent=sum(self._all.spent),
                              available=self._available(self._all, 1))

    def _earned(self, window: _Window, sharing: int) -> float:
        """Tokens `window`'s requests bought, with the reserve split among `sharing` tenants."""
        reserve = self._policy.floor_per_s * self._policy.window_s / max(sharing, 1)
        return self._policy.share * sum(window.requests) + reserve

    def _available(self, window: _Window, sharing: int) -> float:
        return self._earned(window, sharing) - sum(window.spent)

    def _slot_at(self, now: float) -> int:
        return math.floor((now - self._origin) / self._width)

    def _advance(self) -> None:
        """Zero the buckets that fell out of the window since the last call; forget the
        tenants with nothing left in it."""
        now_slot = self._slot_at(self._clock())
        if now_slot <= self._slot:
            return
        stale = min(now_slot - self._slot, self._policy.slots)
        for offset in range(1, stale + 1):
            index = (self._slot + offset) % self._policy.slots
            self._all.clear(index)
            for window in self._tenants.values():
                window.clear(index)
        self._tenants = {t: w for t, w in self._tenants.items() if not w.empty()}
        self._slot = now_slot


def retry_budget(clock: Clock, policy: BudgetPolicy = RETRY_BUDGET_DEFAULTS) -> Budget:
    """The budget for retries and fallbacks after failures (default 20% + 1/s over 10 s)."""
    return Budget(policy, clock)


def hedge_budget(clock: Clock, policy: BudgetPolicy = HEDGE_BUDGET_DEFAULTS) -> Budget:
    """The budget for hedged attempts (default 14% + 0.2/s over 10 s)."""
    return Budget(policy, clock)
