"""A resizable FIFO concurrency limit for one simulated model (its serving capacity).

Requests beyond the limit wait in arrival order, so their TTFT grows with the queue, as on an
overloaded server. The limit can change at run time (control API); `None` means unlimited.
"""

from __future__ import annotations

import asyncio
from collections import deque


class CapacityLimiter:
    """At most `limit` holders at once; the rest queue first-in first-out."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_use(self) -> int:
        return self._in_use

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def set_limit(self, limit: int | None) -> None:
        self._limit = limit
        self._wake()

    def _has_room(self) -> bool:
        return self._limit is None or self._in_use < self._limit

    def _wake(self) -> None:
        while self._waiters and self._has_room():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_use += 1
                waiter.set_result(None)

    async def acquire(self) -> None:
        """Take a slot, waiting in line when the model is at capacity."""
        if self._has_room() and not self._waiters:
            self._in_use += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was granted just as we were cancelled
            raise

    def release(self) -> None:
        self._in_use -= 1
        self._wake()
