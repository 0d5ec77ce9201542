"""A shared store's Redis as `/readyz` checks it: answering, slow, down, refusing writes or the
URL's credentials, evicting.

Each check PINGs through the store's own pooled client (`StoreRedis`): one round trip on a
connection already open, which meets the store's own timeouts (the result cache's 50 ms: a Redis
too slow for the cache is degraded here too, where a client of the check's own, with 0.2 s,
called it fine while every cache call failed). What only a new connection shows (whether Redis
still takes the URL's credentials: a password rotated under the service leaves the connections
already open working; and its `maxmemory-policy`) is looked at on a connection of its own, in the
background, at most once every `LOOK_EVERY_S` (`NewConnections`), never in a probe's way but the
first. Every check ends within `BUDGET_S`: one still waiting then reports the store degraded,
`redis slow`, and `/readyz` answers in time.

Why: `/readyz` made about a dozen round trips one after another, each check on a new connection
(its handshake, then PING, then `INFO memory`), about 24 times Redis's one-way delay: at 25 ms
each way it took 1.17 s, past a Kubernetes probe's 1 s timeout, on every replica at once, for a
Redis that answered everything (the ops audit of 2026-12-07). The checks now run at once
(`router.api.meta`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from router.api.meta import Readiness
from router.redis_auth import answers, evicting_policy, eviction_loss, refusal
from router.redis_writes import WriteHealth, probe_write, refusal_reason

if TYPE_CHECKING:
    from redis.asyncio import Redis

# The most a Redis check may take: well inside a readiness probe's 1 s timeout (Kubernetes'
# default), leaving the rest to the HTTP exchange and a busy event loop.
BUDGET_S = 0.3
# How often a new connection is opened to look at what only it shows: credentials and eviction
# policy change rarely, and a connection's handshake is several round trips.
LOOK_EVERY_S = 5.0
# The time a look's connection has for each step (as `serve`'s start-up checks): it runs in the
# background, so a slow Redis still gets looked at.
LOOK_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class StoreRedis:
    """A store's Redis: its pooled `client`, and the health of its writes when it tells it."""

    client: Redis
    writes: WriteHealth | None = None


def store_redis(store: object) -> StoreRedis | None:
    """The Redis of a store that keeps its records there (its `client` and `writes`), else
    None (one in memory)."""
    from redis.asyncio import Redis

    client = getattr(store, "client", None)
    if not isinstance(client, Redis):
        return None
    writes = getattr(store, "writes", None)
    return StoreRedis(client, writes if isinstance(writes, WriteHealth) else None)


@dataclass(frozen=True, slots=True)
class Look:
    """What a new connection met: why Redis refused the URL (its credentials or database), or
    None; and its evicting `maxmemory-policy`, or None (it never evicts, or hides INFO)."""

    refused: str | None = None
    policy: str | None = None


async def look(url: str, timeout_s: float = LOOK_TIMEOUT_S) -> Look | None:
    """A PING then an `INFO memory` on a connection of its own; None when Redis did not
    answer (the pooled PING says that). Only the connection's own refusal (its handshake, its
    PING) says the URL is refused: INFO is in the ACL's `@dangerous` category, which a
    least-privilege user that may run every command the stores send is often denied, and its
    NOPERM read as refused credentials (a healthy store reported degraded, on every replica:
    the re-audit of 2026-12-07). INFO refused: no policy known, as at start-up."""
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError, ResponseError

    client = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        error = await answers(client)
        if error is not None:
            why = refusal(error)
            return Look(refused=why) if why is not None else None
        try:
            return Look(policy=evicting_policy(await client.info("memory")))
        except ResponseError:  # INFO hidden (NOPERM among them): no policy known
            return Look()
        except (OSError, RedisError):
            return None
    finally:
        await client.aclose()


class NewConnections:
    """The latest `Look` at one Redis, taken in the background at most once every `every_s`
    (a look that finds no answer keeps the last one). Only the first is waited for, by the
    check that starts it, within what that check has left."""

    def __init__(self, url: str, every_s: float = LOOK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic,
                 looker: Callable[[str], Awaitable[Look | None]] = look) -> None:
        self._url = url
        self._every_s = every_s
        self._clock = clock
        self._look = looker
        self._latest: Look | None = None
        self._begun_at: float | None = None
        self._running: asyncio.Task[None] | None = None

    async def latest(self, wait_s: float) -> Look | None:
        now = self._clock()
        if self._running is None and (self._begun_at is None
                                      or now - self._begun_at >= self._every_s):
            self._begun_at = now
            self._running = asyncio.create_task(self._take())
        if self._latest is None and self._running is not None and wait_s > 0:
            with contextlib.suppress(TimeoutError):  # it goes on: a later check reads it
                await asyncio.wait_for(asyncio.shield(self._running), wait_s)
        return self._latest

    async def _take(self) -> None:
        try:
            found = await self._look(self._url)
            if found is not None:
                self._latest = found
        finally:
            self._running = None


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """One store's check, besides its Redis client: its name, its setting, what its Redis down
    and refusing writes cost, its `NewConnections`, and whether it keeps records (which an
    evicting Redis may lose: idempotency, experiments)."""

    name: str
    setting: str
    while_down: str
    while_refused: str
    new_connections: NewConnections | None = None
    records: bool = False


async def check_store(store: StoreCheck, redis: StoreRedis,
                      budget_s: float = BUDGET_S) -> Readiness:
    """The store's readiness: Redis down (or refusing the URL's credentials, to its pooled
    connection or to a new one), slow (no answer to PING within `budget_s`, or the store's own
    timeout), refusing writes (checked again with a write of the check's own while a refusal
    stands, so it clears without traffic), or fine, with what each costs; for a store keeping
    records, whether Redis may evict them. Ends within `budget_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    try:
        async with asyncio.timeout_at(deadline):
            error = await answers(redis.client)
    except TimeoutError:
        return Readiness(store.name, True, f"redis slow: no answer to PING within "
                         f"{budget_s:g} s (if it stays so: {store.while_down})", degraded=True)
    if error is not None:
        return Readiness(store.name, True, _unanswered(store, error), degraded=True)
    seen = (await store.new_connections.latest(deadline - loop.time())
            if store.new_connections is not None else None)
    if seen is not None and seen.refused is not None:
        return Readiness(store.name, True, f"{store.setting}: {seen.refused}, to new "
                         f"connections (those open still answer): {store.while_down} once "
                         "they close", degraded=True)
    if redis.writes is not None:
        with contextlib.suppress(TimeoutError):  # past the budget the PING's answer stands
            async with asyncio.timeout_at(deadline):
                await probe_write(redis.client, redis.writes)
        refused = redis.writes.describe(store.while_refused)
        if refused is not None:
            return Readiness(store.name, True, refused, degraded=True)
    if store.records and seen is not None and seen.policy is not None:
        return Readiness(store.name, True, f"redis (maxmemory-policy {seen.policy}: "
                         f"{eviction_loss(store.setting, seen.policy)})")
    return Readiness(store.name, True, "redis")


def _unanswered(store: StoreCheck, error: BaseException) -> str:
    """Why Redis did not answer the PING, and what that costs: a refusal of its credentials
    is named as the setting's fault (no wait mends it), a Redis that cannot persist (MISCONF
    refuses PING with the writes) as refusing writes, not as down, and a timeout of the
    store's own client as slow."""
    from redis.exceptions import TimeoutError as RedisTimeoutError

    why = refusal(error)
    if why is not None:
        return f"{store.setting}: {why}: {store.while_down}"
    refused = refusal_reason(error)
    if refused is not None:
        return f"redis refuses writes ({refused}): {store.while_refused}"
    if isinstance(error, RedisTimeoutError | TimeoutError):
        return (f"redis slow: no answer to PING within the store's own timeout: "
                f"{store.while_down}")
    return f"redis unavailable ({type(error).__name__}): {store.while_down}"
