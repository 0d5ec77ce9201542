"""Redis credentials the server refuses: a configuration error, not an outage.

A wrong or missing password, or an ACL user that does not exist, is disabled or may not run
the commands (redis-py's `AuthenticationError` for WRONGPASS and NOAUTH, `NoPermissionError`
for NOPERM) will not pass by waiting. `serve` PINGs every configured Redis once at start-up
(`start_up_pings`) and refuses to start on such a refusal, naming the setting; a Redis that
does not answer is an outage the service runs through, warned of at start-up
(`redis_unreachable_at_start`: until then only the first request that needed it told).
`/readyz` says the same of a refusal met later (a rotated password). No message repeats a URL
or a password.

A Redis that may evict keys under memory pressure (a `maxmemory` and a `maxmemory-policy` other
than `noeviction`) costs the result cache and the statistics only speed, but loses records the
idempotency and experiment stores rely on: an evicted Idempotency-Key record lets a duplicate
run again, an evicted outcome lowers an experiment's counts, an evicted halt lifts it. `serve`
warns at start-up (`eviction_risks`, event `redis_may_evict_records`) and `/readyz` says so
under the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from policies.schema import RouterConfig

_START_UP_TIMEOUT_S = 1.0


def redis_settings(config: RouterConfig, *, unused: bool = False) -> list[tuple[str, str]]:
    """(setting, URL) of every Redis the config has the service use; `unused`: also the URLs
    set but not used (the cache's with another backend, the experiments' without any)."""
    server = config.server
    named = [("server.cache.redis_url",
              server.cache.redis_url if server.cache.backend == "redis" or unused else None),
             ("server.stats.redis_url", server.stats.redis_url),
             ("server.experiments_redis_url",
              server.experiments_redis_url if config.experiments or unused else None),
             ("server.idempotency_redis_url", server.idempotency_redis_url)]
    return [(setting, url) for setting, url in named if url is not None]


def redis_passwords(config: RouterConfig) -> list[str]:
    """The password of every Redis URL the config sets (`redis://:pw@host`,
    `rediss://user:pw@host`), as written and percent-decoded, for log redaction. Users are
    names, not secrets: they stay readable."""
    found: list[str] = []
    for _, url in redis_settings(config, unused=True):
        password = urlsplit(url).password
        if password:
            found += sorted({password, unquote(password)})
    return found


def refusal(exc: BaseException) -> str | None:
    """What is wrong with the URL when `exc` is Redis refusing what it gives (the credentials,
    the database number), else None: waiting will not mend it."""
    from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

    if isinstance(exc, AuthenticationError):
        return ("Redis refused to authenticate (a wrong or missing password in the URL, or an "
                "ACL user that does not exist or is disabled)")
    if isinstance(exc, NoPermissionError):
        return "the Redis ACL user may not run the commands slorouter sends (NOPERM)"
    if isinstance(exc, ResponseError) and "db index" in str(exc).lower():
        return ("Redis has no database of the number the URL gives (DB index is out of range: "
                "the server's `databases` setting, 16 by default, numbers them from 0)")
    return None


async def ping(url: str, timeout_s: float) -> BaseException | None:
    """None when the Redis at `url` answers a PING within `timeout_s`, else the error (on a
    connection of its own: start-up, before any store has one)."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        return await answers(client)
    finally:
        await client.aclose()


async def answers(client: aioredis.Redis) -> BaseException | None:
    """None when Redis answers a PING through `client` (within its own timeouts), else the
    error. Through a store's pooled client it costs one round trip on a connection already
    open, where a client of its own paid a new connection's handshake every time."""
    from redis.exceptions import RedisError

    try:
        await client.ping()
        return None
    except (OSError, RedisError) as exc:
        return exc


# What eviction costs the stores that keep records (not copies) in Redis.
EVICTION_LOSES = {
    "server.idempotency_redis_url":
        "Idempotency-Key records may be evicted, and a duplicate then runs again",
    "server.experiments_redis_url":
        "experiment outcomes and halts may be evicted: the counts drop, a halted arm gets "
        "traffic again",
}
# Under a `volatile-*` policy only keys with a TTL go: the experiments' counts and halts have
# none, their exposures (7 days) do.
_VOLATILE_EXPERIMENTS = ("experiment exposures may be evicted: feedback on those requests is "
                         "then a 404")


def eviction_loss(setting: str, policy: str) -> str:
    """What `setting`'s store may lose on a Redis evicting under `policy`."""
    if setting == "server.experiments_redis_url" and policy.startswith("volatile-"):
        return _VOLATILE_EXPERIMENTS
    return EVICTION_LOSES[setting]


async def eviction_policy(url: str, timeout_s: float) -> str | None:
    """The `maxmemory-policy` of the Redis at `url` when it may evict keys (a memory limit and
    a policy other than `noeviction`), else None; None too when `INFO memory` cannot be read
    (a managed Redis that hides it): this is a warning, never a reason to refuse."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        info = await client.info("memory")
    except (OSError, aioredis.RedisError):
        return None
    finally:
        await client.aclose()
    return evicting_policy(info)


def evicting_policy(memory_info: Mapping[str, Any]) -> str | None:
    """The `maxmemory-policy` in an `INFO memory` reply when it may evict keys (a memory limit
    and a policy other than `noeviction`), else None."""
    policy = str(memory_info.get("maxmemory_policy", "noeviction"))
    if policy == "noeviction" or not int(memory_info.get("maxmemory", 0) or 0):
        return None
    return policy


async def _eviction_risks(settings: list[tuple[str, str]]) -> list[tuple[str, str]]:
    policies = await asyncio.gather(*(eviction_policy(url, _START_UP_TIMEOUT_S)
                                      for _, url in settings))
    return [(setting, policy) for (setting, _), policy in zip(settings, policies, strict=True)
            if policy is not None]


def eviction_risks(config: RouterConfig,
                   unanswered: Collection[str] = ()) -> list[tuple[str, str]]:
    """(setting, maxmemory-policy) of each Redis keeping records (idempotency, experiments)
    that may evict them under memory pressure (start-up, outside any event loop). The settings
    in `unanswered` (`start_up_pings` found them not answering) are not asked again: each
    would wait out another start-up timeout."""
    settings = [(setting, url) for setting, url in redis_settings(config)
                if setting in EVICTION_LOSES and setting not in unanswered]
    return asyncio.run(_eviction_risks(settings)) if settings else []


async def _pings(settings: list[tuple[str, str]]) -> list[BaseException | None]:
    return list(await asyncio.gather(*(ping(url, _START_UP_TIMEOUT_S) for _, url in settings)))


def start_up_pings(config: RouterConfig) -> tuple[list[str], list[tuple[str, str]]]:
    """PING every configured Redis once at start-up (outside any event loop): one line per
    Redis that refuses the credentials its URL gives (a configuration error: `serve` refuses to
    start), and (setting, why) per Redis that does not answer (an outage the service runs
    through, warned of at start-up rather than found by the first request that needs it)."""
    settings = redis_settings(config)
    if not settings:
        return [], []
    refused, unreachable = [], []
    for (setting, url), error in zip(settings, asyncio.run(_pings(settings)), strict=True):
        if error is None:
            continue
        why = refusal(error)
        if why is not None:
            refused.append(f"{setting}: {why}")
        else:
            unreachable.append((setting, unreachable_reason(url, error)))
    return refused, unreachable


def unreachable_reason(url: str, error: BaseException) -> str:
    """Why a Redis did not answer, in words an operator can act on (never the URL)."""
    name = type(error).__name__
    if url.startswith("rediss://"):
        return (f"{name}: no answer over TLS (rediss://); a server without TLS (redis://) "
                "does not answer a TLS handshake")
    return f"{name}: no answer (the host or port may be wrong, or the server down)"
