"""What `/readyz` checks, from a validated configuration and the parts built from it.

Config and classifier versions, providers, the result cache, and the stores shared through
Redis: a Redis down, slow, or answering but refusing writes (`router.redis_writes`, learned
from the stores' own writes), is `degraded`, never not ready (why: `router.api.meta`; how each
Redis is checked, within a budget: `router.readiness_redis`). The statistics store's check
(`stats_check`) is added by `router.app`, which builds the store when none is given.
"""

from __future__ import annotations

from policies.schema import RouterConfig
from router.api.meta import Readiness, ReadinessCheck
from router.caching import ResultCaching
from router.classify.types import Classifier
from router.execution.breaker import BreakerRegistry
from router.providers.upstream_answers import MISCONFIGURED
from router.readiness_redis import (
    BUDGET_S,
    NewConnections,
    StoreCheck,
    StoreRedis,
    check_store,
)
from router.redis_writes import WriteHealth
from router.runtime_config import RuntimeConfig
from router.stats import StatsStore

# What the result cache's refused writes cost: nothing is stored, so nothing new is served.
CACHE_REFUSED = ("new answers are not stored (those stored are still served): requests are "
                 "slower, never failed")


def readiness_checks(config: RouterConfig, runtime: RuntimeConfig, classifier: Classifier,
                     caching: ResultCaching | None = None,
                     idempotency_redis: StoreRedis | None = None,
                     experiments_redis: StoreRedis | None = None,
                     policy_violations: int = 0,
                     redis_budget_s: float = BUDGET_S) -> list[ReadinessCheck]:
    """What `/readyz` reports: config and classifier versions, providers, cache backend, and
    the shared stores: a Redis down, slow (no answer within `redis_budget_s`) or refusing
    writes (`*_redis.writes`, learned from the stores' own writes) is `degraded`, never not
    ready (see `router.api.meta`). Each store's Redis is checked through its own pooled client
    (`*_redis`; `caching.redis`), or one of the check's own when none is given. So is a config
    that `policy check` refuses (`policy_violations`: models a floor bars from tasks, whose
    requests may all be 503s), which `serve` starts with a warning."""
    server = config.server
    cache_redis = None
    if server.cache.backend == "redis" and server.cache.redis_url is not None:
        cache_redis = _given_or_own(
            StoreRedis(caching.redis, caching.writes)
            if caching is not None and caching.redis is not None else None,
            server.cache.redis_url, redis_budget_s)
    idempotency_redis = (_given_or_own(idempotency_redis, server.idempotency_redis_url,
                                       redis_budget_s)
                         if server.idempotency_redis_url is not None else None)
    experiments_redis = (_given_or_own(experiments_redis, server.experiments_redis_url,
                                       redis_budget_s)
                         if server.experiments_redis_url is not None and config.experiments
                         else None)
    # Requests without a key are served; keyed ones are refused (503) while it is down.
    keyed_lost = "requests with an Idempotency-Key are refused (503)"
    outcomes_lost = "outcomes are lost and guardrails keep their last halts"
    cache_check = StoreCheck("cache", "server.cache.redis_url", while_down="serving uncached",
                             while_refused=CACHE_REFUSED,
                             new_connections=_looked_at(server.cache.redis_url))
    idempotency_check = StoreCheck("idempotency", "server.idempotency_redis_url",
                                   while_down=keyed_lost, while_refused=keyed_lost,
                                   new_connections=_looked_at(server.idempotency_redis_url),
                                   records=True)
    experiments_check = StoreCheck("experiments", "server.experiments_redis_url",
                                   while_down=outcomes_lost, while_refused=outcomes_lost,
                                   new_connections=_looked_at(server.experiments_redis_url),
                                   records=True)

    async def loaded() -> Readiness:
        if policy_violations:
            return Readiness("config", True, f"policy version {runtime.version}; "
                             f"{policy_violations} policy check violations (models their "
                             "floors bar from tasks: run `slorouter policy check`)",
                             degraded=True)
        return Readiness("config", True, f"policy version {runtime.version}")

    async def model() -> Readiness:
        return Readiness("classifier", True, classifier.version[:12])

    async def providers() -> Readiness:
        return Readiness("providers", bool(runtime.deployments),
                         f"{len(runtime.deployments)} deployments")

    async def cache() -> Readiness:
        spec = server.cache
        if caching is not None and caching.unavailable is not None:
            return Readiness("cache", True, f"{spec.backend} unavailable "
                             f"({caching.unavailable}): serving uncached", degraded=True)
        if cache_redis is None:
            why = caching.degraded() if caching is not None else None
            if why is not None:
                return Readiness("cache", True, f"{spec.backend}: {why}", degraded=True)
            return Readiness("cache", True, spec.backend)
        # The service still answers without its cache (never fails a request for it).
        return await check_store(cache_check, cache_redis, redis_budget_s)

    async def idempotency() -> Readiness:
        if idempotency_redis is None:
            return Readiness("idempotency", True, "memory (this process)")
        return await check_store(idempotency_check, idempotency_redis, redis_budget_s)

    async def experiments() -> Readiness:
        if experiments_redis is None:
            return Readiness("experiments", True,
                             "memory (this process)" if config.experiments else "none")
        return await check_store(experiments_check, experiments_redis, redis_budget_s)

    return [loaded, model, providers, cache, idempotency, experiments]


def _looked_at(url: str | None) -> NewConnections | None:
    return NewConnections(url) if url is not None else None


def _given_or_own(given: StoreRedis | None, url: str, timeout_s: float) -> StoreRedis:
    """The store's own Redis client when given, else a pooled one of the check's own (its
    connection kept from one check to the next)."""
    if given is not None:
        return given
    import redis.asyncio as aioredis

    return StoreRedis(aioredis.from_url(url, socket_timeout=timeout_s,
                                        socket_connect_timeout=timeout_s))


def stats_check(store: StatsStore) -> ReadinessCheck:
    """The statistics store's status (`detail` its backend and state, `status` the whole of
    it as an object, for operators and tests), degraded when the
    replica fell back to its own view (Redis failing) or Redis refuses its pushes (the others
    then miss its statistics). No probe write is needed: a shared store pushes every second."""

    async def stats() -> Readiness:
        status = store.status()
        writes = writes_of(store)
        refused = writes is not None and writes.refusal is not None
        return Readiness("stats", True, f"{status.backend}: {status.detail}",
                         degraded=not status.healthy or refused,
                         status=status.model_dump(mode="json"))

    return stats


def writes_of(store: object) -> WriteHealth | None:
    """The `WriteHealth` of a store that writes to Redis, else None (one in memory)."""
    writes = getattr(store, "writes", None)
    return writes if isinstance(writes, WriteHealth) else None


# The codes of an upstream that refuses the deployment itself (its key, account, model or
# path: `upstream_answers.MISCONFIGURED`): no wait mends them, an operator must.
_MISCONFIGURED_CODES = frozenset(code for code, _ in MISCONFIGURED.values())


def deployments_check(breakers: BreakerRegistry) -> ReadinessCheck:
    """`/readyz`'s `deployments`: degraded while the latest verdict on a deployment is a
    configuration fault (its circuit open or probing on one, or its last call refused for one
    with no success since). An `api_base` whose path the upstream answers 404 (`//v1`, a vLLM
    base without `/v1`) opened its breaker and sent every request to the next, pricier
    deployment, and `/readyz` said nothing (the misconfiguration audit of 2026-12-06). A
    replica of a pinned model loses its traffic to its peers on its first failures, before five
    open its breaker (the ranking), so an open circuit alone is too late a sign."""

    async def deployments() -> Readiness:
        faulty = [f"{b.deployment} ({b.last_failure_code})"
                  for b in breakers.snapshot().deployments
                  if b.last_failure_code in _MISCONFIGURED_CODES
                  and (b.state != "closed" or b.consecutive_failures > 0)]
        if not faulty:
            return Readiness("deployments", True, "no deployment refused for a configuration "
                             "fault since its last success")
        return Readiness("deployments", True,
                         "refused for a configuration fault, its traffic on other "
                         f"deployments if it has any: {', '.join(faulty)} (the upstream refuses "
                         "the key or account, or does not know the model or path: check "
                         "api_key, model and api_base)", degraded=True)

    return deployments
