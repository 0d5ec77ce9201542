"""Redis credentials the server refuses: a configuration error, not an outage.

A wrong or missing password, or an ACL user that does not exist, is disabled or may not run
the commands (redis-py's `AuthenticationError` for WRONGPASS and NOAUTH, `NoPermissionError`
for NOPERM) will not pass by waiting. `serve` PINGs every configured Redis once at start-up
(`credential_problems`) and refuses to start on such a refusal, naming the setting; a Redis
that does not answer is still an outage the service runs through (as before). `/readyz` says
the same of a refusal met later (a rotated password). No message repeats a URL or a password.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policies.schema import RouterConfig

_START_UP_TIMEOUT_S = 1.0


def redis_settings(config: RouterConfig) -> list[tuple[str, str]]:
    """(setting, URL) of every Redis the config has the service use."""
    server = config.server
    named = [("server.cache.redis_url",
              server.cache.redis_url if server.cache.backend == "redis" else None),
             ("server.stats.redis_url", server.stats.redis_url),
             ("server.experiments_redis_url",
              server.experiments_redis_url if config.experiments else None),
             ("server.idempotency_redis_url", server.idempotency_redis_url)]
    return [(setting, url) for setting, url in named if url is not None]


def refusal(exc: BaseException) -> str | None:
    """What is wrong with the credentials when `exc` is Redis refusing them, else None."""
    from redis.exceptions import AuthenticationError, NoPermissionError

    if isinstance(exc, AuthenticationError):
        return ("Redis refused to authenticate (a wrong or missing password in the URL, or an "
                "ACL user that does not exist or is disabled)")
    if isinstance(exc, NoPermissionError):
        return "the Redis ACL user may not run the commands slorouter sends (NOPERM)"
    return None


async def ping(url: str, timeout_s: float) -> BaseException | None:
    """None when the Redis at `url` answers a PING within `timeout_s`, else the error."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        await client.ping()
        return None
    except (OSError, aioredis.RedisError) as exc:
        return exc
    finally:
        await client.aclose()


async def _credential_problems(settings: list[tuple[str, str]]) -> list[str]:
    errors = await asyncio.gather(*(ping(url, _START_UP_TIMEOUT_S) for _, url in settings))
    return [f"{setting}: {why}" for (setting, _), error in zip(settings, errors, strict=True)
            if error is not None and (why := refusal(error)) is not None]


def credential_problems(config: RouterConfig) -> list[str]:
    """One line per configured Redis that refuses the credentials its URL gives (start-up,
    outside any event loop). A Redis that does not answer is no problem here."""
    settings = redis_settings(config)
    return asyncio.run(_credential_problems(settings)) if settings else []
