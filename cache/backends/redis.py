"""The shared result-cache backend: Redis through `redis.asyncio`, one pool per process.

Entries are `SET key value PX ttl_ms` / `GET key`. Redis is an accelerator, never a dependency:
every call is bounded by a short timeout (`op_timeout_s`, socket timeouts and no client-side
retries), and a failure or timeout makes `get` a miss and `set` a no-op, counted in
`CacheMetrics.backend_errors["redis"]` and logged at most once per interval. After a failure
the backend stops calling Redis for `cooldown_s` (every call in that window is an immediate,
counted miss), so a dead server costs one timeout per cool-down, not one per request; the next
call after the cool-down probes it again and the pool reconnects by itself. A command Redis
refuses with an error reply (out of memory under `noeviction`, a READONLY replica) costs no
time and starts no cool-down: the write is a counted no-op and reads still hit.

A failure is Redis's only when nothing Redis answered while the failed call waited: a call
that timed out while others were answered waited on this process (its event loop busy with a
burst of requests, or every pooled connection taken), not on Redis, and starts no cool-down.
Before, a burst of 150 identical requests for a stored answer turned the cache off for a
second (86 went upstream, and the burst's answers were not stored): the pool refused calls
past its 64 connections (`MaxConnectionsError`), and after a restart the first burst's own
CPU ran calls past their 100 ms. The pool now holds as many connections as the router admits
requests (`connect(max_connections=)`), and a call finding them all taken waits for one
within its timeout.

Each `set`'s reply also goes to `writes` (the router passes a `router.redis_writes.WriteHealth`,
which `/readyz` reads): a refused write marks the cache's writes refused, an accepted one clears
that. It costs no command of its own, one call per `set`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from cache.backends.failures import FailureLog
from cache.entry import CachedEntry, decode_entry, encode_entry
from cache.metrics import CacheMetrics

_ERRORS = (RedisError, OSError, TimeoutError)


class WriteReplies(Protocol):
    """Told how each write went (`router.redis_writes.WriteHealth`; the cache cannot import the
    router, so it takes one)."""

    def accepted(self) -> None: ...

    def failed(self, exc: BaseException) -> None: ...


class _Unwatched:
    """No one is told: a cache built without `writes` (tests, benchmarks)."""

    def accepted(self) -> None:
        pass

    def failed(self, exc: BaseException) -> None:
        pass


def connect(url: str, *, timeout_s: float = 0.05, max_connections: int = 64,
            pool_wait_s: float = 0.1) -> Redis:
    """A client with short timeouts and no retries: a slow Redis must look like a miss. Each
    request makes one call at a time, so `max_connections` at the number of requests the
    router admits lets every one of them call at once; a call finding them all taken waits up
    to `pool_wait_s` (the call's own timeout bounds it too)."""
    pool = BlockingConnectionPool.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        max_connections=max_connections,
        timeout=pool_wait_s,
    )
    return Redis.from_pool(pool)


class RedisResultCache:
    """`ResultCache` over a Redis server shared by every router replica."""

    def __init__(
        self,
        client: Redis,
        metrics: CacheMetrics,
        *,
        namespace: str = "",
        op_timeout_s: float = 0.1,
        cooldown_s: float = 1.0,
        log_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        writes: WriteReplies | None = None,
    ) -> None:
        self._client = client
        self._writes: WriteReplies = writes if writes is not None else _Unwatched()
        self._metrics = metrics
        self._namespace = namespace
        self._op_timeout_s = op_timeout_s
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._failures = FailureLog("redis", metrics, log_interval_s, clock)
        self._down_until = float("-inf")
        self._answered_at = float("-inf")  # when Redis last answered a call

    async def get(self, key: str) -> CachedEntry | None:
        """The entry under `key`, or None; Redis down or slow is a counted miss."""
        if self._skipping():
            return None
        started = self._clock()
        try:
            async with asyncio.timeout(self._op_timeout_s):
                raw = await self._client.get(self._namespace + key)
        except _ERRORS as exc:
            self._fail("get", exc, started)
            return None
        self._answered_at = self._clock()
        self._failures.answered()
        return decode_entry(raw) if isinstance(raw, bytes) else None

    async def set(self, key: str, entry: CachedEntry, ttl_s: float) -> bool:
        """Store `entry` for `ttl_s` seconds (at least 1 ms); False when Redis failed."""
        if self._skipping():
            return False
        ttl_ms = max(int(ttl_s * 1000), 1)
        started = self._clock()
        try:
            async with asyncio.timeout(self._op_timeout_s):
                await self._client.set(self._namespace + key, encode_entry(entry), px=ttl_ms)
        except _ERRORS as exc:
            self._writes.failed(exc)
            self._fail("set", exc, started)
            return False
        self._answered_at = self._clock()
        self._failures.answered()
        self._writes.accepted()
        return True

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def _skipping(self) -> bool:
        if self._clock() < self._down_until:
            self._metrics.record_backend_error("redis")
            return True
        return False

    def _fail(self, operation: str, exc: BaseException, started: float) -> None:
        """A failed call (begun at `started`): a cool-down when it says Redis is down."""
        self._failures.report(operation, exc)
        if redis_is_down(exc, started, self._answered_at):
            self._down_until = self._clock() + self._cooldown_s


def redis_is_down(exc: BaseException, started: float, answered_at: float) -> bool:
    """Whether a call that began at `started` and failed with `exc` says Redis is down: not when
    Redis refused the command (an error reply is an answer), nor when it answered another call
    after this one began (this call waited on the router: its event loop, its pool)."""
    return not isinstance(exc, ResponseError) and answered_at <= started
