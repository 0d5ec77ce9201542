"""One priority class: a concurrency limit, a bounded queue and per-tenant fair share.

A tenant that has `max_concurrency_per_tenant` requests running or queued in the class (when
set) is refused at once (429), even with slots free. Otherwise a request enters at once when a
slot is free and nobody waits, or it may queue, unless:
- its tenant already holds (running + queued) its fair share of the class, `ceil((concurrency +
  queue) / tenants present)` → `TenantRateLimitedError` (429);
- the queue is full → the newest queued request of the tenant most over its share is rejected
  (429) to make room for a tenant under its share; if no tenant is over → `OverloadedError` (503).
A freed slot goes to the oldest waiter of the tenants running the fewest requests.
Both rejections happen synchronously (no await), are marked `refused_by_admission` (what
telemetry counts and the HTTP layer jitters, never an upstream's error of the same code) and
carry `retry_after`, estimated from a moving average of how long requests hold a slot (for a
tenant's refusal, at least that average over the requests the tenant holds: it enters when one
of its own ends). Memory is bounded by concurrency + queue length.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from router.admission.config import PoolLimits
from router.errors import OverloadedError, TenantRateLimitedError

Clock = Callable[[], float]
_EWMA_WEIGHT = 0.2


@dataclass(slots=True)
class _Waiter:
    tenant: str
    future: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """Occupancy of one class now."""

    active: int
    queued: int
    tenants: int
    mean_hold_s: float


class Pool:
    """Slots, queue and tenant counts of one priority class. Use from one event loop."""

    def __init__(self, name: str, limits: PoolLimits) -> None:
        self._name = name
        self._limits = limits
        self._active = 0
        self._queue: deque[_Waiter] = deque()
        self._held: dict[str, int] = {}  # running + queued, per tenant
        self._running: dict[str, int] = {}
        self._mean_hold_s = limits.initial_hold_s

    async def acquire(self, tenant: str, wait_s: float) -> bool:
        """Take a slot, queueing at most `wait_s`; `True` when it had to queue.

        Raises `TenantRateLimitedError` / `OverloadedError` at once when it may not queue, and
        `OverloadedError` (code `queue_timeout`) when the wait ran out.
        """
        waiter = self._enter(tenant)
        if waiter is None:
            return False
        try:
            await asyncio.wait({waiter.future}, timeout=max(0.0, wait_s))
        except BaseException:
            self._abandon(waiter)
            raise
        if waiter.future.done():
            waiter.future.result()  # re-raises a rejection made to free room for others
            return True
        self._abandon(waiter)
        raise OverloadedError(
            f"{self._name} queue wait exceeded", code="queue_timeout",
            retry_after=self.retry_after_s(), refused_by_admission=True,
        )

    def release(self, tenant: str, held_s: float) -> None:
        """Give back a slot held for `held_s` seconds; hand it to the next waiter."""
        self._mean_hold_s += _EWMA_WEIGHT * (held_s - self._mean_hold_s)
        self._active -= 1
        self._count_running(tenant, -1)
        self._drop(tenant)
        self._hand_off()

    def has_room(self) -> bool:
        """Whether a request arriving now is admitted at once (no queue)."""
        return self._active < self._limits.max_concurrency and not self._queue

    def retry_after_s(self, at_least_s: float = 0.0) -> float:
        """Seconds until a slot is likely free for a newcomer (and at least `at_least_s`),
        clamped to the limits."""
        drain = self._mean_hold_s * (len(self._queue) + 1) / self._limits.max_concurrency
        wait = max(self._limits.retry_after_min_s, drain, at_least_s)
        return min(self._limits.retry_after_max_s, wait)

    def snapshot(self) -> PoolSnapshot:
        return PoolSnapshot(self._active, len(self._queue), len(self._held), self._mean_hold_s)

    def _enter(self, tenant: str) -> _Waiter | None:
        """Admit now (None), queue (a waiter), or raise a rejection."""
        cap = self._limits.max_concurrency_per_tenant
        if cap is not None and self._held.get(tenant, 0) >= cap:
            raise self._tenant_rejection(tenant, f"holds {cap} requests of {self._name} "
                                                 "capacity, its max_concurrency_per_tenant")
        if self.has_room():
            self._active += 1
            self._count_running(tenant, 1)
            self._held[tenant] = self._held.get(tenant, 0) + 1
            return None
        share = self._fair_share(tenant)
        others = len(self._held) - (1 if tenant in self._held else 0)
        if others and self._held.get(tenant, 0) >= share:  # alone, a tenant is not over a share
            raise self._tenant_rejection(tenant)
        if len(self._queue) >= self._limits.max_queue and not self._evict_over_share(share):
            raise OverloadedError(f"{self._name} queue is full", code="overloaded",
                                  retry_after=self.retry_after_s(), refused_by_admission=True)
        waiter = _Waiter(tenant, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        self._held[tenant] = self._held.get(tenant, 0) + 1
        return waiter

    def _fair_share(self, tenant: str) -> int:
        tenants = len(self._held) + (0 if tenant in self._held else 1)
        capacity = self._limits.max_concurrency + self._limits.max_queue
        return max(1, math.ceil(capacity / tenants))

    def _evict_over_share(self, share: int) -> bool:
        """Reject the newest queued request of the tenant most over `share` among those with a
        request queued; False if none is. The most over of all may hold running requests
        only: it was chosen, nothing of its was queued, and the newcomer was refused while
        another tenant over its share had queued ones (the overload audit of 2026-12-07)."""
        queued = {waiter.tenant for waiter in self._queue}
        over = [(held, t) for t, held in self._held.items() if held > share and t in queued]
        if not over:
            return False
        _, victim = max(over)
        for waiter in reversed(self._queue):
            if waiter.tenant == victim:
                self._queue.remove(waiter)
                self._drop(victim)
                waiter.future.set_exception(self._tenant_rejection(victim))
                return True
        return False

    def _tenant_rejection(self, tenant: str, why: str = "") -> TenantRateLimitedError:
        # The tenant gets room when one of its own requests ends, not when any slot frees:
        # with n of them held, about mean hold / n (the pool's drain divides by the whole
        # concurrency, which told a tenant at its cap to retry long before it could enter).
        own_s = self._mean_hold_s / max(1, self._held.get(tenant, 0))
        return TenantRateLimitedError(
            f"tenant {tenant!r} {why or f'is over its share of {self._name} capacity'}",
            code="tenant_over_share", retry_after=self.retry_after_s(own_s),
            refused_by_admission=True,
        )

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter gave up (timeout, cancel): leave the queue, or give back a handed slot."""
        if waiter in self._queue:
            self._queue.remove(waiter)
            self._drop(waiter.tenant)
        elif waiter.future.done() and waiter.future.exception() is None:
            self.release(waiter.tenant, self._mean_hold_s)

    def _hand_off(self) -> None:
        while self._queue and self._active < self._limits.max_concurrency:
            waiter = self._next_waiter()
            if waiter.future.done():
                self._drop(waiter.tenant)
                continue
            self._active += 1
            self._count_running(waiter.tenant, 1)
            waiter.future.set_result(None)

    def _next_waiter(self) -> _Waiter:
        """The oldest waiter of the tenants running the fewest requests: a freed slot goes to
        the tenant that has least of the class, first in, first out among equals. (Plain FIFO
        handed every slot to a flooding tenant's earlier queued requests while another
        tenant's only request, queued behind them, waited them all out or timed out.)"""
        fewest = self._running.get(self._queue[0].tenant, 0)
        if fewest:  # does a tenant with waiters run less than the head's? (tenants, not waiters)
            lower = [running for tenant, held in self._held.items()
                     if held > (running := self._running.get(tenant, 0))]  # it has waiters
            fewest = min(lower, default=fewest)
        for waiter in self._queue:  # the head, unless a tenant running less waits
            if self._running.get(waiter.tenant, 0) == fewest:
                break
        if waiter is self._queue[0]:
            return self._queue.popleft()
        self._queue.remove(waiter)
        return waiter

    def _count_running(self, tenant: str, change: int) -> None:
        _count(self._running, tenant, change)

    def _drop(self, tenant: str) -> None:
        _count(self._held, tenant, -1)


def _count(counts: dict[str, int], tenant: str, change: int) -> None:
    """Add `change` to the tenant's count; a tenant at zero leaves (memory stays bounded)."""
    left = counts.get(tenant, 0) + change
    if left > 0:
        counts[tenant] = left
    else:
        counts.pop(tenant, None)
