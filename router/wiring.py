"""From a validated configuration to a running app: the concrete parts `serve` uses.

Kept apart from `router.app` (which takes parts) so tests and benchmarks can build the app
from their own parts, and apart from `serve_cli` (process concerns: ports, children, signals).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from cache.metrics import CacheMetrics
from cache.policy import CacheRule
from cache.result import ResultCache, ResultCacheFront
from policies.eval_provenance import bind_to_deployments, deployed_provider_models
from policies.eval_report import EvalReportError, QualityTable, load_reports
from policies.learned_checks import artifact_problems, learned_uses
from policies.schema import RouterConfig
from router.api.front import FrontDoor
from router.api.sse import InFlight
from router.app import build_app
from router.caching import ResultCaching
from router.classify.types import Classifier
from router.errors import ConfigError
from router.experimentation import Experiments, memory_store
from router.idempotency import IdempotencyStore, MemoryIdempotencyStore, RedisIdempotencyStore
from router.logs import event
from router.outcomes import LogSink
from router.providers.base import AdapterName, Deployment, Provider
from router.providers.price_table import PriceTable
from router.readiness import readiness_checks
from router.readiness_redis import store_redis
from router.redis_auth import redis_passwords
from router.redis_writes import WriteHealth
from router.runtime_config import RuntimeConfig, facts_version, resolve
from router.stats import LocalStatsStore, StatsConfig, StatsStore
from router.telemetry.settings import TelemetrySettings
from router.telemetry.setup import build_telemetry

if TYPE_CHECKING:
    from redis import asyncio as aioredis

    from policies.learned.artifact import LoadedRouter


log = logging.getLogger("slorouter.wiring")


def load_quality(config: RouterConfig, base_dir: Path,
                 now: datetime | None = None) -> QualityTable:
    """The eval reports a config names (paths relative to the config file), each result tied
    to the provider models the config deploys under its model's name (and to the optional
    maximum report age): a result made for other provider models backs no floor."""
    if config.policies is None or not config.policies.eval_reports:
        return QualityTable.empty()
    try:
        table = load_reports([base_dir / path for path in config.policies.eval_reports])
    except EvalReportError as err:
        raise ConfigError(err.problems) from err
    deployed = deployed_provider_models({m.name: m.deployments for m in config.models},
                                        {d.name: d.model for d in config.deployments})
    return bind_to_deployments(table, deployed, now if now is not None else datetime.now(UTC),
                               config.policies.eval_report_max_age_days)


def load_learned(config: RouterConfig, base_dir: Path) -> dict[str, LoadedRouter]:
    """The learned routers policies name (artifact directories relative to the config), each
    checked against those policies: configured models, covered tasks, calibrated floor."""
    if config.policies is None:
        return {}
    uses = learned_uses(config.policies)
    if not uses:
        return {}
    # Imported only when used: scikit-learn (for the features' hashing) costs a second of start-up.
    from policies.learned.artifact import ArtifactError, load_artifact

    models = {m.name for m in config.models}
    loaded, problems = {}, []
    for name in sorted(uses):
        try:
            router = load_artifact(base_dir / name)
        except (OSError, ArtifactError) as err:
            problems.append(f"learned_router {name}: {err}")
            continue
        unknown = [m for m in (*router.rule.candidates, router.rule.fallback) if m not in models]
        if unknown:
            problems.append(f"learned_router {name}: models {unknown} are not configured")
        problems += artifact_problems(name, router, uses[name])
        loaded[name] = router
    if problems:
        raise ConfigError(problems)
    return loaded


def _litellm_passes(config: RouterConfig) -> Callable[[str, str], bool]:
    """Whether litellm passes a request field on to a model: asked of litellm only when a
    deployment uses it (importing it costs seconds; such a deployment imports it anyway)."""
    if not any(d.adapter == "litellm" for d in config.deployments):
        return lambda _model, _field: True
    from router.providers.litellm_adapter import passes_field

    return passes_field


def build_runtime(config: RouterConfig, environ: Mapping[str, str],
                  base_dir: Path) -> tuple[RuntimeConfig, Classifier]:
    from router.classify import load_default_classifier

    classifier = load_default_classifier()
    table = PriceTable.bundled()
    # Every problem at once: a missing eval report must not hide an unset key or a price.
    problems: list[str] = []
    quality, learned = QualityTable.empty(), {}
    try:
        quality = load_quality(config, base_dir)
    except ConfigError as err:
        problems += err.problems
    try:
        learned = load_learned(config, base_dir)
    except ConfigError as err:
        problems += err.problems
    if any(d.adapter == "litellm" for d in config.deployments):
        # From the specs, which need no secret: a model string litellm cannot serve used to be
        # reported only once every key and eval problem was fixed.
        from router.providers.litellm_adapter import provider_problems

        problems += provider_problems(config.deployments, environ)
    try:
        runtime = resolve(config, environ, table.prices, classifier.version, quality=quality,
                          learned=learned, cached_prices=table.cached_input_price,
                          write_prices=table.cache_write_price,
                          write_1h_prices=table.cache_write_1h_price,
                          litellm_passes=_litellm_passes(config))
    except ConfigError as err:
        raise ConfigError(problems + err.problems) from None
    if problems:
        raise ConfigError(problems)
    return runtime, classifier


def warn_unbacked_floors(config: RouterConfig, quality: QualityTable) -> int:
    """What `policy check` (the CI gate) would refuse, said at start-up: a model a policy
    names whose floor no eval backs never serves that task (a floor with no eval report at
    all, or a report naming the model otherwise, makes every such request a 503). Returns how
    many violations there are (`/readyz` lists the config as degraded while there are)."""
    from policies.check import check_policies, policy_warnings

    if quality.warnings:
        event(log, "eval_reports_unchecked", logging.WARNING, warnings=list(quality.warnings))
    for warning in policy_warnings(config, quality):  # what `policy check` warns of too
        event(log, "policy_warning", logging.WARNING, warning=warning)
    violations = check_policies(config, quality)
    if violations:
        event(log, "policy_check_failed", logging.WARNING, count=len(violations),
              violations=[str(v) for v in violations[:20]],
              hint="run `slorouter policy check`; these models never serve those tasks")
    return len(violations)


def warn_ended_experiments(config: RouterConfig, now: datetime) -> None:
    """An experiment whose `stop` has passed loads but never assigns a request (no
    `x-slorouter-arm`), which looks like a broken experiment: say so at start-up. (A `start`
    not before its `stop` is a load error, `policies.experiments.schema`.)"""
    from policies.check import ended_experiments

    for name, stop in ended_experiments(config, now):
        event(log, "experiment_ended", logging.WARNING, experiment=name, stop=stop.isoformat(),
              hint="its stop has passed, so no request takes part; move stop or remove it")


def result_caching(config: RouterConfig) -> ResultCaching:
    """The result cache the config asks for: diskcache (default), Redis, or none."""
    from cache.backends.disk import DiskResultCache, disk_full
    from cache.backends.redis import RedisResultCache, connect

    spec = config.server.cache
    rule = CacheRule(enabled=spec.default.enabled, ttl_s=spec.default.ttl_s,
                     require_deterministic=spec.default.require_deterministic)
    metrics = CacheMetrics()
    backend: ResultCache
    writes: WriteHealth | None = None
    redis: aioredis.Redis | None = None
    if spec.backend == "none":
        return ResultCaching(None, rule, metrics)  # the providers' prompt caches are still counted
    if spec.backend == "redis":
        assert spec.redis_url is not None  # the schema requires it
        writes = WriteHealth("cache")  # its refusals, for /readyz
        admitted = sum(pool.max_concurrency for pool in (config.server.reliability.interactive,
                                                         config.server.reliability.background))
        redis = connect(spec.redis_url, max_connections=admitted)
        backend = RedisResultCache(redis, metrics, writes=writes)
    else:
        # Relative to the working directory (not the config's), like any state the process
        # writes; the embedded default's config lives inside the installed package.
        directory = Path(spec.directory) if spec.directory else Path(".slorouter") / "cache"
        try:
            disk = DiskResultCache(directory.resolve(), metrics, size_limit_bytes=int(
                spec.disk_size_limit_mb * 1024 * 1024))
        except (OSError, sqlite3.Error) as err:  # sqlite: a directory it cannot write in
            if disk_full(err):  # no mistake in the config: run uncached, as when it fills later
                event(log, "cache_unavailable", logging.WARNING, directory=str(
                    directory.resolve()), error=str(err), hint="its disk is full: serving "
                    "uncached until a restart after space is freed")
                return ResultCaching(None, rule, metrics, unavailable=f"disk full: {err}")
            why = getattr(err, "strerror", None) or err
            if isinstance(err, FileExistsError | NotADirectoryError):
                why = "it, or a directory above it, is a file"  # mkdir's bare "File exists"
            raise ConfigError([f"server.cache.directory: cannot use {directory.resolve()}: "
                               f"{why}"]) from err
        if disk.corrupt is not None:
            event(log, "cache_corrupt_emptied", logging.WARNING, directory=str(
                directory.resolve()), error=disk.corrupt, files_deleted=disk.files_deleted,
                hint="its database was corrupt: deleted with every cached answer; the cache "
                "starts empty")
        elif disk.files_deleted:
            event(log, "cache_set_aside_files_deleted", logging.INFO, directory=str(
                directory.resolve()), files_deleted=disk.files_deleted, hint="cache.db.corrupt "
                "files set aside by an earlier version, and the answers only they referenced")
        backend = disk
    degraded = backend.degraded if isinstance(backend, DiskResultCache) else None
    return ResultCaching(ResultCacheFront(backend, metrics), rule, metrics, writes=writes,
                         degraded=degraded, redis=redis)


def stats_store(config: RouterConfig,
                deployments: Mapping[str, Deployment] | None = None) -> StatsStore:
    """Local statistics, shared through Redis when `server.stats.redis_url` is set, each
    deployment's under the identity of what it calls (its model string and address)."""
    spec = config.server.stats
    local = LocalStatsStore(StatsConfig(half_life_s=spec.half_life_s))
    if spec.redis_url is None:
        return local
    from router.stats import RedisStatsStore
    from router.stats.codec import deployment_identity

    identities = {name: deployment_identity(d.model, d.api_base)
                  for name, d in (deployments or {}).items()}
    return RedisStatsStore(local, shared_redis(spec.redis_url, timeout_s=None),
                           identities=identities)


def idempotency_store(config: RouterConfig) -> IdempotencyStore:
    """Where Idempotency-Key records live: this process, or a Redis shared by the replicas."""
    url = config.server.idempotency_redis_url
    if url is None:
        return MemoryIdempotencyStore(
            time.monotonic, max_bytes=config.server.idempotency_memory_mb << 20)
    # A keyed request's claim waits for a pooled connection within the same 1 s its command
    # gets: past the pool's connections (a burst, or Redis pausing inside its timeout) it
    # failed at once with a 503 while Redis was healthy.
    return RedisIdempotencyStore(shared_redis(url, timeout_s=1.0, pool_wait_s=1.0))


# Connections a shared client opens at most (redis-py's default pool size).
SHARED_REDIS_CONNECTIONS = 100


def shared_redis(url: str, *, timeout_s: float | None,
                 pool_wait_s: float | None = None) -> aioredis.Redis:
    """A client of a Redis the replicas share, which sends a command once more on a fresh
    connection when its pooled one is found closed: Redis restarted, or dropped an idle
    connection (its `timeout`, a proxy's). Without that, each stale connection failed one
    request (a keyed one with 503) while Redis was healthy. Never after a timeout: a command
    that may have run is not sent twice by the client (the stores settle that themselves).
    redis-py's `Retry` retries its `TimeoutError` too unless told otherwise: a Redis stalled
    past the timeout then ran an experiment's outcome twice (counted twice) and a keyed
    request waited two timeouts for its 503.

    With `pool_wait_s`, a command that finds all its connections busy waits up to that long
    for one instead of failing at once (`MaxConnectionsError`): for writes made in the
    background, which a short pause of Redis under load must delay, not lose."""
    import redis.asyncio as aioredis
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    once_more = aioredis.retry.Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    if pool_wait_s is None:
        return aioredis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                 retry=once_more, retry_on_error=[RedisConnectionError])
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=SHARED_REDIS_CONNECTIONS, timeout=pool_wait_s,
        socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=once_more,
        retry_on_error=[RedisConnectionError])
    return aioredis.Redis.from_pool(pool)


def experiments(config: RouterConfig, runtime: RuntimeConfig | None = None) -> Experiments:
    """The configured experiments, their outcomes shared through Redis when configured (kept
    under what their arms are served by: with `runtime`, its resolved prices and capabilities
    and learned routers too)."""
    url = config.server.experiments_redis_url
    if url is None:
        return Experiments(config.experiments, memory_store())
    import random

    from router.experiments.outcomes_redis import RedisOutcomeStore

    # Every request writes its exposure and outcome in the background: a burst of them while
    # Redis pauses (well inside the timeout) used to fail past the pool's connections, lost.
    client = shared_redis(url, timeout_s=1.0, pool_wait_s=1.0)
    from policies.experiment_version import served_version

    # What each experiment's arms are served by: its spec and what its routes resolve to.
    resolved = ({model: facts_version({model: facts})
                 for model, facts in runtime.model_facts.items()} if runtime is not None else None)
    learned = ({path: router.version for path, router in runtime.learned.items()}
               if runtime is not None else None)
    versions = {spec.name: served_version(spec, config, resolved, learned)
                for spec in config.experiments}
    return Experiments(config.experiments,
                       RedisOutcomeStore(client, random.Random(), versions=versions))


def telemetry_from_env(environ: Mapping[str, str]) -> TelemetrySettings:
    """Telemetry settings from the environment; a bad value is a configuration error."""
    try:
        return TelemetrySettings.from_env(environ)
    except ValidationError as err:
        raise ConfigError([f"telemetry setting {'.'.join(map(str, e['loc']))} from the "
                           f"environment (SLOROUTER_TELEMETRY_*, OTEL_*): {e['msg']}"
                           for e in err.errors()]) from err


def secret_values(config: RouterConfig, environ: Mapping[str, str]) -> list[str]:
    """Every secret the config references (provider and client keys) and the passwords in its
    Redis URLs, for log redaction."""
    refs = [d.api_key for d in config.deployments if d.api_key]
    refs += [k.key for k in config.api_keys if k.key]
    return [environ[name] for ref in refs
            if (name := ref.removeprefix("env:")) in environ and environ[name]
            ] + redis_passwords(config)


def litellm_in_use(deployments: Iterable[Deployment]) -> bool:
    """Whether any deployment uses the litellm adapter; raises `ConfigError` when litellm
    cannot serve one of them (an unknown provider prefix or model string). `serve` and
    `policy check` both ask, so a config the check passes also starts."""
    mine = [d for d in deployments if d.adapter == "litellm"]
    if not mine:
        return False
    # Imported only when used: litellm costs seconds of start-up and about 100 MB.
    from router.providers.litellm_adapter import provider_problems

    problems = provider_problems(mine)
    if problems:
        raise ConfigError(problems)
    return True


def credential_warnings(deployments: Iterable[Deployment]) -> list[str]:
    """The litellm deployments with no key at all (none configured, none in the provider's
    variable): `serve` logs them, `policy check` prints them."""
    keyless = [d for d in deployments if d.adapter == "litellm" and not d.api_key]
    if not keyless:
        return []
    from router.providers.litellm_adapter import credential_problems

    return credential_problems(keyless)


def output_limit_warnings(deployments: Iterable[Deployment]) -> list[str]:
    """The litellm deployments a request without `max_tokens` would fail on (Anthropic's
    models litellm cannot size, without `max_output_tokens`): `serve` logs them, `policy
    check` prints them."""
    unsized = [d for d in deployments if d.output_limit_required and d.max_output_tokens is None]
    if not unsized:
        return []
    from router.providers.litellm_adapter import unsized_output_problems

    return unsized_output_problems(unsized)


def build_from_config(config: RouterConfig, environ: Mapping[str, str], base_dir: Path,
                      in_flight: InFlight | None = None) -> tuple[FrontDoor, RuntimeConfig]:
    from router.providers.passthrough import PassthroughProvider

    runtime, classifier = build_runtime(config, environ, base_dir)
    unbacked = warn_unbacked_floors(config, runtime.quality)
    warn_ended_experiments(config, datetime.now(UTC))
    providers: dict[AdapterName, Provider] = {"openai_passthrough": PassthroughProvider()}
    if litellm_in_use(runtime.deployments.values()):
        from router.providers.litellm_adapter import LitellmProvider

        providers["litellm"] = LitellmProvider()
        keyless = credential_warnings(runtime.deployments.values())
        if keyless:
            event(log, "deployment_missing_credentials", logging.WARNING, problems=keyless)
        unsized = output_limit_warnings(runtime.deployments.values())
        if unsized:
            event(log, "deployment_unknown_output_limit", logging.WARNING, problems=unsized)
    if runtime.price_warnings:
        event(log, "deployment_price_off", logging.WARNING, problems=list(runtime.price_warnings))
    if runtime.key_warnings:
        event(log, "weak_api_key", logging.WARNING, problems=list(runtime.key_warnings))
    caching = result_caching(config)
    idempotency = idempotency_store(config)
    trials = experiments(config, runtime)
    settings = config.telemetry if config.telemetry is not None else telemetry_from_env(environ)
    telemetry = (build_telemetry(settings, runtime.deployments,
                                 secrets=secret_values(config, environ))
                 if settings.enabled else None)
    app = build_app(runtime, classifier, providers, sinks=[LogSink()], telemetry=telemetry,
                    checks=readiness_checks(config, runtime, classifier, caching,
                                            store_redis(idempotency), store_redis(trials.store),
                                            policy_violations=unbacked),
                    caching=caching, stats=stats_store(config, runtime.deployments),
                    idempotency=idempotency, experiments=trials, in_flight=in_flight)
    return app, runtime
