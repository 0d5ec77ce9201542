"""The admission controller: `async with controller.admit(tenant, priority, deadline): ...`.

One `Pool` per priority class (interactive, background), each with its own concurrency limit,
bounded queue (FIFO per tenant; a freed slot goes to the tenant running least) and tenant fair
share. The wait in queue is bounded by the class's `max_queue_wait_s` and by the request's remaining
deadline; the time spent queued is measured and returned. The slot is held for the whole `async
with` block, so a streamed response should stay inside it until its last byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
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

    def admit(self, tenant: str, priority: Priority,
              deadline: HasRemaining | None = None) -> Admitting:
        """Hold a slot for the `async with` block; raises 429/503 errors at once when it may
        not queue."""
        return Admitting(self._pools[priority], self._clock, tenant, priority,
                         self._policy.pools[priority].max_queue_wait_s, deadline)

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


class Admitting:
    """`AdmissionController.admit`'s context: a slot of `pool`, taken on entry (after queueing
    at most the class's wait, and never past `deadline`) and given back on exit. A class, not a
    generator-based context manager: one enters on every request."""

    __slots__ = ("_admitted", "_clock", "_deadline", "_max_wait_s", "_pool", "_priority",
                 "_tenant")

    def __init__(self, pool: Pool, clock: Clock, tenant: str, priority: Priority,
                 max_wait_s: float, deadline: HasRemaining | None) -> None:
        self._pool, self._clock = pool, clock
        self._tenant, self._priority = tenant, priority
        self._max_wait_s, self._deadline = max_wait_s, deadline
        self._admitted = 0.0

    async def __aenter__(self) -> Admission:
        limit, deadline = self._max_wait_s, self._deadline
        wait_s = min(limit, deadline.remaining()) if deadline is not None else limit
        arrived = self._clock()
        queued = await self._pool.acquire(self._tenant, wait_s)
        self._admitted = self._clock()
        return Admission(self._tenant, self._priority, queued, self._admitted - arrived)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        self._pool.release(self._tenant, self._clock() - self._admitted)
