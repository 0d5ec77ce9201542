"""The configuration file's model: deployments, logical models, routes, API keys, server settings.

Validated with pydantic (`extra="forbid"` everywhere), immutable once loaded. Cross-references
(route → model → deployment) are checked by `policies.loader`, which lists every problem at once.
Nothing here resolves secrets or talks to providers: `api_key: env:NAME` stays a reference.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from policies.config_model import ConfigModel
from policies.experiments.schema import ExperimentSpec
from policies.labels import Risk, Task
from policies.telemetry import TelemetrySettings

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
_SECRET_REF = r"^env:[A-Za-z_][A-Za-z0-9_]*$"
Name = Annotated[str, Field(pattern=_NAME)]
SecretRef = Annotated[str, Field(pattern=_SECRET_REF)]
# What each pattern means, for configuration errors (`policies.loader`).
_SHA256 = r"^[0-9a-f]{64}$"
PATTERN_MEANINGS = {
    _SHA256: "a SHA-256 digest: 64 lower-case hexadecimal digits (sha256sum's output)",
    _NAME: ("a name: 1-128 ASCII letters, digits and . _ : / -, starting with a letter or "
            "a digit"),
    _SECRET_REF: ("an environment variable reference, env:NAME (a key is never written in "
                  "the file itself)"),
}


class Frozen(ConfigModel):
    # Infinity is no price, timeout or share (NaN was already refused by every bound).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _redis_url(url: str | None) -> str | None:
    """`redis://[[user]:password@]host[:port][/db]`, `rediss://...` or `unix://...`, checked as
    redis-py will read it at start-up. The message never repeats the URL: it may hold a
    password (one with `/`, `?`, `#` or `@` unencoded is the usual way to break it)."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("is not a Redis URL: it must start with redis://, rediss:// or unix://")
    if parts.scheme != "unix":
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or port == -1:
            raise ValueError("is not a Redis URL of the form redis://[[user]:password@]host"
                             "[:port][/db] (characters such as / ? # @ in a password must be "
                             "percent-encoded)")
    if parts.scheme != "unix" and not re.fullmatch(r"/?|/\d+", parts.path):
        # redis-py reads a path that is not a number as no database at all: database 0.
        raise ValueError("names its database as something other than a number: the path of a "
                         "Redis URL is empty or /<db>, e.g. /0")
    problem = _redis_options_problem(url)
    if problem is not None:
        raise ValueError(problem)
    return url


# Query options redis-py's connection pool takes besides those of its connection class.
_POOL_OPTIONS = frozenset({"connection_class", "max_connections", "timeout"})


def _redis_options_problem(url: str) -> str | None:
    """What redis-py would fail on in the URL's query options (a value it cannot read, at
    start-up; an option no connection takes, at the first connection), else None. Only option
    names are repeated, never values."""
    import inspect

    from redis.asyncio import connection

    try:
        options = connection.parse_url(url)
    except ValueError as exc:
        message = str(exc)
        return (f"has an option redis-py cannot read ({message.rstrip('.')})"
                if url not in message else "has an option redis-py cannot read")
    taken = set(_POOL_OPTIONS)
    for klass in options.get("connection_class", connection.Connection).__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            taken.update(inspect.signature(init).parameters)
    unknown = sorted(set(options) - taken)
    if unknown:
        return f"has query options redis-py does not take: {', '.join(unknown)}"
    return None


RedisUrl = Annotated[str | None, AfterValidator(_redis_url)]


def _url_problem(url: str) -> str | None:
    """What makes `url` unusable as a server's base URL (host, port, characters), or None."""
    if not url.isascii() or any(c.isspace() for c in url):
        return ("holds whitespace or characters beyond ASCII (a `${VAR}` with a trailing "
                "space?); percent-encode a path's other characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its check: a port that is not a number raises)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return ("holds credentials (user:password@): put the key in api_key (env:NAME); the "
                "adapters send it as the Authorization header")
    return None


class DeploymentSpec(Frozen):
    """One concrete endpoint of a model: provider + model + base URL + key."""

    name: Name
    model: str = Field(min_length=1, description="litellm model string, e.g. openai/gpt-4o-mini")
    adapter: Literal["litellm", "openai_passthrough"] = "litellm"
    api_base: str | None = None
    api_key: SecretRef | None = None
    # Azure OpenAI's `api-version` (litellm adapter; None: litellm's default, or the process's
    # AZURE_API_VERSION). An `?api-version=` in api_base is not read: litellm adds its own.
    api_version: str | None = Field(default=None, min_length=1, max_length=64)
    input_price_per_mtok: float | None = Field(default=None, ge=0)
    output_price_per_mtok: float | None = Field(default=None, ge=0)
    cached_input_price_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_price_per_mtok: float | None = Field(default=None, ge=0)
    cache_write_1h_price_per_mtok: float | None = Field(default=None, ge=0)
    context_window: int | None = Field(default=None, gt=0)
    # The most output tokens the model writes in one answer (OpenAI's "max output tokens"):
    # a larger output limit, the client's or a cost ceiling's, is lowered to it when sent.
    max_output_tokens: int | None = Field(default=None, gt=0)
    supports_tools: bool = True
    supports_json: bool = True
    # Whether it answers `n` > 1 choices, and log probabilities; None: pass-through yes, litellm
    # as litellm says of the provider (it drops `n` and `logprobs` for Anthropic, Bedrock,
    # Mistral, Ollama: one choice comes, and no log probabilities).
    supports_n: bool | None = None
    supports_logprobs: bool | None = None
    # The highest `temperature` the provider takes; None: 1 for Anthropic's models (a model
    # string with provider `anthropic` or naming Claude), else 2 (OpenAI's range). A request
    # above it is not sent there: `auto` routes it to a deployment that takes it.
    max_temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    zero_data_retention: bool = False
    connect_timeout_s: float = Field(default=5.0, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    # The bulkhead: at most this many upstream attempts in flight at once (None: no cap).
    max_in_flight: int | None = Field(default=None, gt=0)
    # A self-hosted OpenAI-compatible server (not OpenAI, not Anthropic) gets a per-tenant
    # `cache_salt` (vLLM: prefix-cache reuse only within a tenant). Off for a single-tenant
    # deployment, or a server that rejects unknown request fields.
    tenant_cache_salt: bool = True

    @field_validator("model")
    @classmethod
    def _no_whitespace(cls, value: str) -> str:
        # `"openai/sim-fast "` from a quoted template was sent as written: the provider
        # answered 404 and `auto` moved every request to the next deployment.
        if any(character.isspace() for character in value):
            raise ValueError(f"model must not contain whitespace (it is sent to the provider "
                             f"as written): write {''.join(value.split())!r}")
        return value

    @field_validator("api_base")
    @classmethod
    def _http_base(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://", value):
            raise ValueError("api_base must start with http:// or https://")
        problem = _url_problem(value)
        if problem is not None:
            # Each of these started and then failed every request as an upstream error (a
            # client-side ValueError the litellm adapter reported as an answer it could not
            # read), while /readyz saw no configuration fault.
            raise ValueError(f"api_base {problem}")
        scheme, _, rest = value.partition("://")
        path, mark, query = rest.partition("?")
        # `${BASE}/v1` with BASE ending in `/` gave `//v1`, a path servers answer 404 (and
        # every request fell back to the next deployment).
        path = re.sub('/{2,}', '/', path).rstrip('/')
        if info.data.get("adapter") == "openai_passthrough" and (
                mark or "#" in path or path.endswith("/chat/completions")):
            # The pass-through adapter appends `/chat/completions` to api_base: after a query
            # or fragment, or to a full endpoint, every call was a 404 (and `auto` moved all
            # traffic to the next, dearer, deployment). litellm builds its own URLs.
            raise ValueError("api_base must be the API's base URL such as https://host/v1, "
                             "without a query, fragment or /chat/completions (the pass-through "
                             "adapter adds /chat/completions itself)")
        return f"{scheme}://{path}{mark}{query}"

    def model_post_init(self, _context: object) -> None:
        if self.adapter == "openai_passthrough" and self.api_base is None and \
                "/" in self.model and not self.model.startswith("openai/"):
            raise ValueError(
                f"the pass-through adapter without api_base calls OpenAI's API "
                f"(https://api.openai.com/v1) with this deployment's key: set api_base to the "
                f"server of {self.model!r} (or write the model as openai/<name> if it is "
                f"OpenAI's)")
        if self.api_version is not None and self.adapter != "litellm":
            raise ValueError("api_version is passed by the litellm adapter only (Azure "
                             "OpenAI); the pass-through adapter sends none")
        if (self.max_output_tokens is not None and self.context_window is not None
                and self.max_output_tokens > self.context_window):
            raise ValueError(f"max_output_tokens ({self.max_output_tokens}) is more than "
                             f"context_window ({self.context_window})")


class ModelSpec(Frozen):
    """A logical model name that clients and policies use, served by one or more deployments."""

    name: Name
    deployments: tuple[Name, ...] = Field(min_length=1)


class ApiKeySpec(Frozen):
    """A client key (by env reference or by its SHA-256), mapped to a tenant and scopes.

    `risk_hints`: what the key's risk hint (`x-slorouter-risk`, `metadata.risk`) may do to the
    classifier's risk: `may_lower` (the default) replaces it, up or down; `raise_only` moves it
    up only, for clients not trusted to say their request is safer than it looks. Neither goes
    below the floor the detectors set.
    """

    key: SecretRef | None = None
    key_sha256: Annotated[str, Field(pattern=_SHA256)] | None = None
    tenant: Name
    scopes: tuple[str, ...] = ()
    risk_hints: Literal["may_lower", "raise_only"] = "may_lower"

    def model_post_init(self, _context: object) -> None:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("set exactly one of key (env:NAME) or key_sha256")


class RoutesSpec(Frozen):
    """How the routing alias `auto` resolves: a per-task default model and a catch-all. With a
    `policies` section the policies route every task and only `aliases` is read; without one
    `default_model` is required (the loader says so)."""

    aliases: tuple[Name, ...] = ("auto",)
    default_model: Name | None = None
    by_task: dict[Task, Name] = Field(default_factory=dict)


class QualityFloor(Frozen):
    """Minimum eval-measured quality: absolute (`min`) or relative to a reference model."""

    metric: str = Field(default="accuracy", min_length=1)
    min: float | None = Field(default=None, ge=0, le=1)
    relative_to: Name | None = None
    ratio: float | None = Field(default=None, gt=0, le=1)

    def model_post_init(self, _context: object) -> None:
        absolute = self.min is not None
        relative = self.relative_to is not None or self.ratio is not None
        if absolute == relative or (relative and (self.relative_to is None or self.ratio is None)):
            raise ValueError("set either `min`, or both `relative_to` and `ratio`")


class SloSpec(Frozen):
    """Per-task latency targets at fixed percentiles, and availability."""

    ttft_p95_ms: float | None = Field(default=None, gt=0)
    tpot_p95_ms: float | None = Field(default=None, gt=0)
    e2e_p99_ms: float | None = Field(default=None, gt=0)
    availability: float = Field(default=0.995, gt=0, lt=1)


class WeightsSpec(Frozen):
    slo: float = Field(default=1.0, ge=0)
    cost: float = Field(default=1.0, ge=0)
    latency: float = Field(default=1.0, ge=0)


class CacheRule(Frozen):
    enabled: bool = False
    ttl_s: float = Field(default=3600.0, gt=0)
    # False: also cache answers to sampled requests (neither temperature 0 nor a seed), for
    # tasks where any good answer will do (autocomplete); one sample is then served to all.
    require_deterministic: bool = True


class RiskRule(Frozen):
    """Extra restrictions for one risk level (e.g. only zero-data-retention providers)."""

    candidates: tuple[Name, ...] | None = None
    require_zero_data_retention: bool = False
    cache: bool = True


Objective = Literal["min_cost", "min_latency", "weighted"]


class TaskPolicy(Frozen):
    """How one task is routed: who may serve it, how good they must be, what wins."""

    candidates: tuple[Name, ...] = Field(min_length=1)
    objective: Objective = "min_cost"
    weights: WeightsSpec = WeightsSpec()
    quality_floor: QualityFloor | None = None
    slo: SloSpec = SloSpec()
    max_cost_per_request_usd: float | None = Field(default=None, gt=0)
    fallbacks: tuple[Name, ...] = ()
    no_candidate_fallback: Name | None = None  # None: reject with 503 when none qualifies
    cache: CacheRule = CacheRule()
    learned_router: str | None = None
    hedging: bool = False
    require_idempotency_key: bool = False
    timeout_s: float | None = Field(default=None, gt=0)
    risk: dict[Risk, RiskRule] = Field(default_factory=dict)

    def narrowed_to(self, model: Name) -> TaskPolicy:
        """This policy with `model` as its only candidate and no fallbacks (an experiment arm's
        model, a policy's `no_candidate_fallback`)."""
        return self.model_copy(update={"candidates": (model,), "fallbacks": ()})


class PoliciesSpec(Frozen):
    """Per-task policies (a `default` for unlisted tasks) and the eval reports behind floors."""

    default: TaskPolicy
    tasks: dict[Task, TaskPolicy] = Field(default_factory=dict)
    eval_reports: tuple[str, ...] = ()
    # Off by default: a result from a report older than this many days backs no floor (checked
    # at start-up and by `policy check`, from the report's `created`).
    eval_report_max_age_days: float | None = Field(default=None, gt=0)
    # A request naming a configured model (not `auto`) skips every policy check. True: it is
    # held to its task's risk rule all the same (allowed models, zero data retention, cache),
    # so a data-governance rule cannot be bypassed by naming a model; no other check applies.
    enforce_risk_rule_on_pinned_requests: bool = False

    @model_validator(mode="after")
    def _tasks_inherit_defaults_risk_rules(self) -> PoliciesSpec:
        """A risk rule under `default` holds for every task whose policy sets none for that
        level, so a data-governance rule written once cannot be escaped by a task hint (or a
        classification) naming a task without one. A task opts out of a level with an empty
        rule (`high: {}`)."""
        inherited = {task: policy.model_copy(update={"risk": {**self.default.risk,
                                                              **policy.risk}})
                     for task, policy in self.tasks.items()
                     if set(self.default.risk) - set(policy.risk)}
        if inherited:
            object.__setattr__(self, "tasks", {**self.tasks, **inherited})
        return self

    @model_validator(mode="after")
    def _tasks_inherit_defaults_cost_ceiling(self) -> PoliciesSpec:
        """`default`'s `max_cost_per_request_usd` holds for every task whose policy does not
        set one, for the same reason: a ceiling written once for a shared deployment was
        escaped by a task hint naming a task without one (the ops audit: `n: 16` refused as
        `chat`, served as `math` at five times the ceiling). A task opts out with an explicit
        `max_cost_per_request_usd: null`."""
        ceiling = self.default.max_cost_per_request_usd
        if ceiling is None:
            return self
        inherited = {task: policy.model_copy(update={"max_cost_per_request_usd": ceiling})
                     for task, policy in self.tasks.items()
                     if "max_cost_per_request_usd" not in policy.model_fields_set}
        if inherited:
            object.__setattr__(self, "tasks", {**self.tasks, **inherited})
        return self

    def for_task(self, task: Task) -> TaskPolicy:
        return self.tasks.get(task, self.default)


class PoolSpec(Frozen):
    """One admission class: concurrent requests, queue length, longest wait in the queue."""

    max_concurrency: int = Field(gt=0)
    max_queue: int = Field(ge=0)
    max_queue_wait_s: float = Field(ge=0)
    max_concurrency_per_tenant: int | None = Field(default=None, gt=0)  # running + queued


class BudgetSpec(Frozen):
    """Extra attempts allowed: `share` of requests plus `floor_per_s`, over a sliding window."""

    share: float = Field(ge=0, le=1)
    floor_per_s: float = Field(ge=0)
    window_s: float = Field(default=10.0, gt=0)


class BreakerSpec(Frozen):
    consecutive_failures: int = Field(default=5, gt=0)
    error_rate: float = Field(default=0.5, gt=0, le=1)
    min_volume: int = Field(default=20, gt=0)
    window_s: float = Field(default=10.0, gt=0)
    cool_down_s: float = Field(default=5.0, ge=0)
    half_open_probes: int = Field(default=1, gt=0)
    # A Retry-After (429) holds the deployment open once this many failures come in a row ...
    holds_after: int = Field(default=2, gt=0)
    # ... for at most this long (a provider asking for a day is asked again by a probe)
    max_hold_s: float = Field(default=60.0, gt=0)


class ReliabilitySpec(Frozen):
    """Admission, retries, hedging and breakers (defaults measured in bench/chaos_primitives.py)."""

    interactive: PoolSpec = PoolSpec(max_concurrency=64, max_queue=128, max_queue_wait_s=2.0)
    background: PoolSpec = PoolSpec(max_concurrency=16, max_queue=256, max_queue_wait_s=30.0)
    retry_budget: BudgetSpec = BudgetSpec(share=0.2, floor_per_s=1.0)
    hedge_budget: BudgetSpec = BudgetSpec(share=0.14, floor_per_s=0.2)
    max_retries_per_deployment: int = Field(default=1, ge=0, le=5)
    backoff_base_s: float = Field(default=0.05, ge=0)
    backoff_cap_s: float = Field(default=2.0, ge=0)
    breaker: BreakerSpec = BreakerSpec()
    hedge_percentile: float = Field(default=0.88, gt=0, lt=1)
    # ... but never later than this many times the observed median TTFT: a percentile estimated
    # from a window where the slow tail happens to be heavier lands inside the tail itself.
    hedge_max_median_ratio: float = Field(default=3.0, gt=1)

    @model_validator(mode="before")
    @classmethod
    def _partial_sections_keep_their_defaults(cls, data: object) -> object:
        """`interactive: {max_concurrency: 8}` changes that one field: the others keep this
        section's defaults (they differ between the pools and budgets, so the sections'
        own classes cannot hold them)."""
        if not isinstance(data, dict):
            return data
        merged = dict(data)
        for name in ("interactive", "background", "retry_budget", "hedge_budget"):
            given, default = merged.get(name), cls.model_fields[name].default
            if isinstance(given, dict) and isinstance(default, BaseModel):
                merged[name] = {**default.model_dump(), **given}
        return merged


class CacheSpec(Frozen):
    """The result cache's backend, and the rule for requests no task policy covers."""

    backend: Literal["disk", "redis", "none"] = "disk"
    directory: str | None = None  # default: ./.slorouter/cache
    # The disk cache's size: past it, diskcache evicts the least recently stored entries.
    disk_size_limit_mb: float = Field(default=1024.0, gt=0, le=1e9)  # at most 1 PB
    redis_url: RedisUrl = None
    default: CacheRule = CacheRule()
    prefix_affinity: bool = True  # requests sharing a prefix stay on one replica of a model

    @model_validator(mode="after")
    def _redis_needs_an_address(self) -> CacheSpec:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("redis_url is required for the redis backend")
        if self.backend != "redis" and self.redis_url:
            # It was ignored: each replica kept its own disk cache (the misconfiguration audit).
            raise ValueError(f"redis_url is read by the redis backend only, and the backend is "
                             f"{self.backend}: set backend: redis to share the cache through "
                             f"it, or remove redis_url")
        return self


class StatsSpec(Frozen):
    """Online latency statistics: how fast old observations fade, exploration, sharing."""

    half_life_s: float = Field(default=5.0, gt=0)
    explore_share: float = Field(default=0.03, ge=0, le=0.2)
    redis_url: RedisUrl = None  # share statistics between replicas


class ServerSpec(Frozen):
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    # What the request bodies being parsed and routed at once may add up to (each counted once
    # it has arrived, at its size); past it a request is refused (503 `bodies_over_budget`)
    # before its body is parsed. Bodies are read before admission (a slow upload holds no
    # slot), so nothing else bounds them: a body costs about three times its size in memory
    # while parsed, and the process keeps the peak.
    max_body_bytes_in_flight: int = Field(default=256 * 1024 * 1024, gt=0)
    request_timeout_s: float = Field(default=120.0, gt=0)
    # On SIGTERM: how long requests in flight (long streams) may take to finish before they are
    # cut. Keep the orchestrator's own grace period (Kubernetes: 30 s) a little longer.
    shutdown_grace_s: int = Field(default=30, ge=0)
    cache: CacheSpec = CacheSpec()
    reliability: ReliabilitySpec = ReliabilitySpec()
    stats: StatsSpec = StatsSpec()
    experiments_redis_url: RedisUrl = None  # share experiment outcomes between replicas
    # Share Idempotency-Key records between replicas (without it: one execution per process).
    idempotency_redis_url: RedisUrl = None
    # How long a keyed request's in-flight marker outlives its holder's last renewal (renewed
    # every third of it): a crashed replica's duplicates run this long after the crash; a
    # holder stalled (or cut from Redis) this long loses its key to a duplicate.
    idempotency_lease_s: float = Field(default=5.0, ge=1.0, le=300.0)
    # Without `idempotency_redis_url`: the memory this process's Idempotency-Key records may
    # hold (stored answers plus about 1 KB each); past it, completed records are evicted.
    idempotency_memory_mb: int = Field(default=128, ge=1)

    @model_validator(mode="after")
    def _one_body_fits_the_budget(self) -> ServerSpec:
        if self.max_body_bytes_in_flight < self.max_body_bytes:
            raise ValueError(f"max_body_bytes_in_flight ({self.max_body_bytes_in_flight}) is "
                             f"under max_body_bytes ({self.max_body_bytes}): a body of the "
                             "largest size allowed could never be read")
        return self


class RouterConfig(Frozen):
    """The whole configuration file."""

    version: Literal[1] = 1
    deployments: tuple[DeploymentSpec, ...] = Field(min_length=1)
    models: tuple[ModelSpec, ...] = Field(min_length=1)
    routes: RoutesSpec = RoutesSpec()
    api_keys: tuple[ApiKeySpec, ...] = ()
    server: ServerSpec = ServerSpec()
    policies: PoliciesSpec | None = None
    experiments: tuple[ExperimentSpec, ...] = ()
    telemetry: TelemetrySettings | None = None  # None: from SLOROUTER_TELEMETRY_* / OTEL_* env
