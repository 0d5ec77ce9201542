"""What `/readyz` checks, from a validated configuration and the parts built from it.

Config and classifier versions, providers, the result cache, and the stores shared through
Redis: a Redis down, or answering but refusing writes (`router.redis_writes`, learned from the
stores' own writes), is `degraded`, never not ready (why: `router.api.meta`). The statistics
store's check (`stats_check`) is added by `router.app`, which builds the store when none is given.
"""

from __future__ import annotations

from policies.schema import RouterConfig
from router.api.meta import Readiness, ReadinessCheck
from router.caching import ResultCaching
from router.classify.types import Classifier
from router.execution.breaker import BreakerRegistry
from router.providers.upstream_answers import MISCONFIGURED
from router.redis_writes import WriteHealth, probe_write, refusal_reason
from router.runtime_config import RuntimeConfig
from router.stats import StatsStore

# What the result cache's refused writes cost: nothing is stored, so nothing new is served.
CACHE_REFUSED = ("new answers are not stored (those stored are still served): requests are "
                 "slower, never failed")


def readiness_checks(config: RouterConfig, runtime: RuntimeConfig, classifier: Classifier,
                     caching: ResultCaching | None = None,
                     idempotency_writes: WriteHealth | None = None,
                     experiments_writes: WriteHealth | None = None,
                     policy_violations: int = 0) -> list[ReadinessCheck]:
    """What `/readyz` reports: config and classifier versions, providers, cache backend, and
    the shared stores: a Redis down or refusing writes (`*_writes`, learned from the stores'
    own writes) is `degraded`, never not ready (see `router.api.meta`). So is a config that
    `policy check` refuses (`policy_violations`: models a floor bars from tasks, whose
    requests may all be 503s), which `serve` starts with a warning."""

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
        spec = config.server.cache
        if caching is not None and caching.unavailable is not None:
            return Readiness("cache", True, f"{spec.backend} unavailable "
                             f"({caching.unavailable}): serving uncached", degraded=True)
        if spec.backend != "redis" or spec.redis_url is None:
            why = caching.degraded() if caching is not None else None
            if why is not None:
                return Readiness("cache", True, f"{spec.backend}: {why}", degraded=True)
            return Readiness("cache", True, spec.backend)
        # The service still answers without its cache (never fails a request for it).
        return await _redis_store(
            "cache", spec.redis_url, "server.cache.redis_url", while_down="serving uncached",
            while_refused=CACHE_REFUSED, writes=caching.writes if caching is not None else None)

    async def idempotency() -> Readiness:
        url = config.server.idempotency_redis_url
        if url is None:
            return Readiness("idempotency", True, "memory (this process)")
        # Requests without a key are served; keyed ones are refused (503) while it is down.
        lost = "requests with an Idempotency-Key are refused (503)"
        return await _redis_store("idempotency", url, "server.idempotency_redis_url",
                                  while_down=lost, while_refused=lost,
                                  writes=idempotency_writes, records=True)

    async def experiments() -> Readiness:
        url = config.server.experiments_redis_url
        if url is None or not config.experiments:
            return Readiness("experiments", True,
                             "memory (this process)" if config.experiments else "none")
        lost = "outcomes are lost and guardrails keep their last halts"
        return await _redis_store("experiments", url, "server.experiments_redis_url",
                                  while_down=lost, while_refused=lost,
                                  writes=experiments_writes, records=True)

    return [loaded, model, providers, cache, idempotency, experiments]


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


async def _redis_store(name: str, url: str, setting: str, *, while_down: str,
                       while_refused: str, writes: WriteHealth | None,
                       records: bool = False) -> Readiness:
    """A store in Redis: down, refusing writes (checked again with a write of `/readyz`'s own
    while a refusal stands, so it clears without traffic), or fine; what each costs is said
    (`while_down`, `while_refused`). For a store of `records`, also whether Redis may evict
    them."""
    state, up = await _redis_state(url, setting, while_down, while_refused, records=records)
    if up and writes is not None:
        await probe_write(url, writes, 0.2)
        refused = writes.describe(while_refused)
        if refused is not None:
            return Readiness(name, True, refused, degraded=True)
    return Readiness(name, True, state, degraded=not up)


async def _redis_state(url: str, setting: str, while_down: str, while_refused: str,
                       records: bool = False) -> tuple[str, bool]:
    """("redis", True) when it answers a PING within 0.2 s, else why not and what that
    means: a refusal of its credentials is named as the setting's fault (no wait will mend
    it), and a Redis that cannot persist (MISCONF refuses PING with the writes) as refusing
    writes, not as down. For a store of `records` (idempotency, experiments), also when that
    Redis may evict them."""
    from router.redis_auth import eviction_loss, eviction_policy, ping, refusal

    error = await ping(url, 0.2)
    if error is None:
        policy = await eviction_policy(url, 0.2) if records else None
        if policy is not None:
            return f"redis (maxmemory-policy {policy}: {eviction_loss(setting, policy)})", True
        return "redis", True
    why = refusal(error)
    if why is not None:
        return f"{setting}: {why}: {while_down}", False
    refused = refusal_reason(error)
    if refused is not None:
        return f"redis refuses writes ({refused}): {while_refused}", False
    return f"redis unavailable ({type(error).__name__}): {while_down}", False


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
