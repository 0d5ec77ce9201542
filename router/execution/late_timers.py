"""Timeouts that, firing late, let the I/O that is already waiting be read first.

When the process stops for a while (SIGSTOP, a frozen container, a VM live-migrated, the event
loop blocked by a long computation), the timers that expired meanwhile and the answers that
arrived meanwhile meet in the first turns of the loop once it runs again, and a turn of uvloop's
loop starts with its timers: a task that the answer woke is cancelled by its expired timeout
before it runs, and a future an answer would have woken (one that arrived while a callback was
stopped) is failed by its timer before the socket is polled. So an upstream answer that arrived
in time was cut by its attempt's timeout: the client got a 504 for an answer the router held,
and the healthy deployment a breaker failure (the pause audit of 2026-12-06: a 25 s pause
opened the breaker of a deployment that had answered all six requests, and an idempotent call
that had answered 200 was reported as `unknown_commit`).

A timer that fires more than `LATE_S` after its time is therefore re-armed once, `grace_s`
later (by default `GRACE_S`: the turns of the loop that read and relay what arrived during the
pause; one millisecond was enough for one request, not for twenty at once, each needing a few
turns: the re-audit of 2026-12-06). A timeout that was not late fires as asyncio's does, and one
that fired late says so (`fired_late`): the process stood still, not the upstream, so the
runner does not count it against the deployment. `timeout`/`timeout_at` are
`asyncio.timeout`/`timeout_at` with that rule, `expire_future_at` the same for a bare future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

# Later than this past its time, a timer is taken to have fired after a pause of the process
# (or of the loop), not on time: far beyond the loop's own lateness under load (a few ms).
LATE_S = 0.25
# Re-armed this much later: the loop reads and relays what is waiting in between.
GRACE_S = 0.25


class LateTolerantTimeout:
    """`asyncio.timeout_at(when)` (the same semantics: `TimeoutError` out of the block when it
    expired, a cancellation from elsewhere left as it is), whose expiry, when it fires `LATE_S`
    late, is deferred once by `grace_s`."""

    __slots__ = ("_cancelling", "_deferred", "_expired", "_grace_s", "_handle", "_task",
                 "_when")

    def __init__(self, when: float | None, grace_s: float = GRACE_S) -> None:
        self._when = when
        self._grace_s = grace_s
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._deferred = False
        self._expired = False

    async def __aenter__(self) -> LateTolerantTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a timeout must be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        if self._when is not None:
            self._handle = asyncio.get_running_loop().call_at(self._when, self._on_timeout)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        # Expired, and only its own cancellation pending: a timeout, not a cancellation.
        if self._expired and self._task is not None and \
                self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    @property
    def fired_late(self) -> bool:
        """Whether it fired `LATE_S` late (and was deferred): the process or its loop stood
        still past the deadline."""
        return self._deferred

    def _on_timeout(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not self._deferred and self._when is not None and now - self._when > LATE_S:
            self._deferred = True
            self._handle = loop.call_at(now + self._grace_s, self._on_timeout)
            return
        self._handle = None
        if self._task is not None:
            self._task.cancel()
            self._expired = True


def timeout(delay: float | None, grace_s: float = GRACE_S) -> LateTolerantTimeout:
    """`asyncio.timeout(delay)`, deferred once by `grace_s` when it fires late."""
    when = None if delay is None else asyncio.get_running_loop().time() + delay
    return LateTolerantTimeout(when, grace_s)


def timeout_at(when: float | None, grace_s: float = GRACE_S) -> LateTolerantTimeout:
    """`asyncio.timeout_at(when)`, deferred once by `grace_s` when it fires late."""
    return LateTolerantTimeout(when, grace_s)


def expire_future_at(loop: asyncio.AbstractEventLoop, when: float,
                     expire: Callable[[asyncio.Future[None]], None],
                     future: asyncio.Future[None]) -> asyncio.TimerHandle:
    """`loop.call_at(when, expire, future)`, deferred once by `GRACE_S` when it fires late. The
    handle returned is the first timer's: cancelled before it fires, neither runs (the second,
    armed once it has, fails the future only if nothing came meanwhile)."""

    def fire() -> None:
        now = loop.time()
        if now - when > LATE_S:
            loop.call_at(now + GRACE_S, expire, future)  # a no-op once the future is done
        else:
            expire(future)

    return loop.call_at(when, fire)
