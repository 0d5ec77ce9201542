"""The admission controller: `async with controller.admit(tenant, priority, deadline): ...`.

One `Pool` per priority class (interactive, background), each with its own concurrency limit,
bounded queue (FIFO per tenant; a freed slot goes to the tenant running least) and tenant fair
share. The wait in queue is bounded by the class's `max_queue_wait_s` and by the request's remaining
deadline; the time spent queued is measured and returned. The slot is held for the whole `async
with` block, so a streamed response should stay inside it until its last byte.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from router.admission.config import AdmissionPolicy, Priority
from router.admission.pool import Pool, PoolSnapshot

Clock = Callable[[], float]


class HasRemaining(Protocol):
    """Anything with a remaining time budget (`router.execution.deadline.Deadline` fits)."""

    def remaining(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Admission:
    """The ticket of an admitted request."""

    tenant: str
    priority: Priority
    queued: bool
    queue_time_s: float


class AdmissionController:
    """Per-priority pools, shared by every request of this process."""

    def __init__(self, policy: AdmissionPolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._pools: dict[Priority, Pool] = {
            priority: Pool(priority, limits) for priority, limits in policy.pools.items()
        }

    @asynccontextmanager
    async def admit(
        self, tenant: str, priority: Priority, deadline: HasRemaining | None = None
    ) -> AsyncIterator[Admission]:
        """Hold a slot for the block; raises 429/503 errors at once when it may not queue."""
        pool = self._pools[priority]
        limit = self._policy.pools[priority].max_queue_wait_s
        wait_s = min(limit, deadline.remaining()) if deadline is not None else limit
        arrived = self._clock()
        queued = await pool.acquire(tenant, wait_s)
        admitted = self._clock()
        try:
            yield Admission(tenant, priority, queued, admitted - arrived)
        finally:
            pool.release(tenant, self._clock() - admitted)

    def has_room(self, priority: Priority) -> bool:
        """Whether `admit` would take a slot at once, without queueing."""
        return self._pools[priority].has_room()

    @property
    def policy(self) -> AdmissionPolicy:
        """The limits of every class (what `snapshot` is measured against)."""
        return self._policy

    def snapshot(self) -> dict[Priority, PoolSnapshot]:
        """Occupancy of every class."""
        return {priority: pool.snapshot() for priority, pool in self._pools.items()}
