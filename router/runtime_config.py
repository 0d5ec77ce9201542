"""The loaded configuration, resolved for run time: secrets read, prices known, version fixed.

`resolve(config, environ)` turns a validated `RouterConfig` into an immutable `RuntimeConfig`,
or raises `ConfigError` listing every missing secret and unknown price at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from policies.eligibility import DeploymentFacts
from policies.eval_report import QualityTable
from policies.labels import Task
from policies.loader import config_hash, content_hash
from policies.schema import ApiKeySpec, DeploymentSpec, RouterConfig, TaskPolicy
from router.errors import ConfigError
from router.providers.base import Deployment, anthropic_model, default_max_temperature

if TYPE_CHECKING:  # loaded only when a policy names a learned router (imports scikit-learn)
    from policies.learned.artifact import LoadedRouter

PriceTable = Callable[[str], tuple[float, float] | None]
CachedPriceTable = Callable[[str], float | None]
ModelCapability = Callable[[str, str], bool]  # (litellm model string, OpenAI field)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, its permission scopes, and whether its risk hints may lower
    the classifier's risk (its key's `risk_hints`)."""

    tenant: str
    scopes: tuple[str, ...] = ()
    risk_hints_may_lower: bool = True


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    source: RouterConfig
    version: str
    config_version: str  # every setting (`policies.loader.config_hash`): `/readyz`, start-up
    deployments: Mapping[str, Deployment]
    model_facts: Mapping[str, tuple[DeploymentFacts, ...]]
    models: Mapping[str, tuple[str, ...]]
    aliases: frozenset[str]
    default_model: str | None  # None only with policies, which route every task
    model_by_task: Mapping[Task, str]
    principals: Mapping[str, Principal]  # sha256(key) hex → principal
    max_body_bytes: int
    max_body_bytes_in_flight: int
    request_timeout_s: float
    quality: QualityTable
    learned: Mapping[str, LoadedRouter]  # by the policy's `learned_router` path
    # (task, model) → the task's policy narrowed to that model, for each experiment arm whose
    # route is `model:<name>`: made once here, not per request (a new policy object per request
    # also missed every cache keyed by the policy)
    arm_policies: Mapping[tuple[Task, str], TaskPolicy]
    # Configured prices far from litellm's for the same model (`price_warnings`): `serve` logs
    # them, `policy check` prints them.
    price_warnings: tuple[str, ...] = ()
    # Client keys too short to withstand guessing (`weak_key_warnings`): `serve` logs them.
    key_warnings: tuple[str, ...] = ()

    @property
    def auth_required(self) -> bool:
        return bool(self.principals)


def arm_policies(config: RouterConfig) -> dict[tuple[Task, str], TaskPolicy]:
    """Each experiment arm's `model:<name>` route applied to each of its experiment's tasks:
    the task's policy with that model as its only candidate and no fallbacks."""
    policies = config.policies
    if policies is None:
        return {}
    return {(task, model): policies.for_task(task).narrowed_to(model)
            for experiment in config.experiments for arm in experiment.arms
            if (model := arm.route.removeprefix("model:")) != arm.route
            for task in experiment.tasks}


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _secret(ref: str | None, environ: Mapping[str, str], where: str, problems: list[str]) -> str:
    if ref is None:
        return ""
    name = ref.removeprefix("env:")
    value = environ.get(name)
    if not value:
        problems.append(f"{where}: environment variable {name} is not set")
        return ""
    if not value.isprintable() or value.strip() != value or " " in value:
        # An HTTP header cannot carry it, and every request would fail before it left.
        problems.append(f"{where}: environment variable {name} holds whitespace or control "
                        "characters (a trailing newline from a secret file?); a key has none")
        return ""
    if not value.isascii():
        # Clients and SDKs send header values as ASCII (the `openai` client cannot encode any
        # other): such a key would start and never authenticate a request.
        problems.append(f"{where}: environment variable {name} holds characters beyond ASCII; "
                        "a key travels in an HTTP header, and must be ASCII")
        return ""
    return value


def _deployment(spec: DeploymentSpec, environ: Mapping[str, str], prices: PriceTable,
                problems: list[str], cached_prices: CachedPriceTable,
                write_prices: CachedPriceTable, write_1h_prices: CachedPriceTable,
                litellm_passes: ModelCapability) -> Deployment:
    key = _secret(spec.api_key, environ, f"deployments.{spec.name}.api_key", problems)
    known = prices(spec.model)
    price_in = spec.input_price_per_mtok
    price_out = spec.output_price_per_mtok
    if (price_in is None or price_out is None) and known is None:
        problems.append(f"deployments.{spec.name}: no price in litellm's table for "
                        f"{spec.model!r}; set input_price_per_mtok and output_price_per_mtok")
    return Deployment(
        name=spec.name, model=spec.model, adapter=spec.adapter, api_base=spec.api_base,
        api_key=key if key else None,
        input_price_per_mtok=price_in if price_in is not None else (known or (0.0, 0.0))[0],
        output_price_per_mtok=price_out if price_out is not None else (known or (0.0, 0.0))[1],
        context_window=spec.context_window, max_output_tokens=spec.max_output_tokens,
        supports_tools=spec.supports_tools,
        supports_json=spec.supports_json, zero_data_retention=spec.zero_data_retention,
        supports_n=_answers(spec, spec.supports_n, "n", litellm_passes),
        supports_logprobs=_answers(spec, spec.supports_logprobs, "logprobs", litellm_passes),
        max_temperature=(spec.max_temperature if spec.max_temperature is not None
                         else default_max_temperature(spec.model)),
        supports_functions=_answers(spec, None, "functions", litellm_passes),
        supports_json_object=spec.supports_json and _answers(spec, None, JSON_OBJECT,
                                                             litellm_passes),
        supports_schema_with_tools=_answers(spec, None, SCHEMA_WITH_TOOLS, litellm_passes),
        passes_tools=_answers(spec, None, "tools", litellm_passes),
        supports_tool_choice=_answers(spec, None, "tool_choice", litellm_passes),
        supports_stop=_answers(spec, None, "stop", litellm_passes),
        # litellm's Anthropic translation keeps text, images and documents, never audio
        supports_audio_input=spec.adapter != "litellm" or not anthropic_model(spec.model),
        supports_audio_output=all(_answers(spec, None, name, litellm_passes)
                                  for name in ("modalities", "audio")),
        connect_timeout_s=spec.connect_timeout_s, timeout_s=spec.timeout_s,
        max_in_flight=spec.max_in_flight, tenant_cache_salt=spec.tenant_cache_salt,
        api_version=spec.api_version,
        cached_input_price_per_mtok=(spec.cached_input_price_per_mtok
                                     if spec.cached_input_price_per_mtok is not None
                                     else _prompt_cache_price(price_in, known,
                                                        cached_prices(spec.model))),
        cache_write_price_per_mtok=(spec.cache_write_price_per_mtok
                                    if spec.cache_write_price_per_mtok is not None
                                    else _prompt_cache_price(price_in, known,
                                                       write_prices(spec.model))),
        cache_write_1h_price_per_mtok=(spec.cache_write_1h_price_per_mtok
                                       if spec.cache_write_1h_price_per_mtok is not None
                                       else _prompt_cache_price(price_in, known,
                                                                write_1h_prices(spec.model))),
    )


# The JSON modes `litellm_passes` is asked about, beside request fields.
JSON_OBJECT = "response_format:json_object"
SCHEMA_WITH_TOOLS = "response_format:json_schema+tools"


def _answers(spec: DeploymentSpec, setting: bool | None, field: str,
             litellm_passes: ModelCapability) -> bool:
    """Whether the deployment answers the request field `field`: as the config sets it, else
    a pass-through deployment does and a litellm one as litellm passes the field on."""
    if setting is not None:
        return setting
    return spec.adapter != "litellm" or litellm_passes(spec.model, field)


def _prompt_cache_price(configured_in: float | None, listed: tuple[float, float] | None,
                  listed_cached: float | None) -> float | None:
    """A prompt-cache price (read or write) a deployment has no setting for: litellm's listed
    one, scaled to the configured input price when there is one (a contract price of $0.10
    with a list price of $2.50 and a cached list price of $1.25 makes $0.05, not $1.25: 12.5
    times the input price it replaces); None (such tokens at the input price) when litellm
    lists none."""
    if listed_cached is None or configured_in is None:
        return listed_cached
    if listed is None or listed[0] <= 0:
        return None
    return configured_in * listed_cached / listed[0]


# Fewer characters than this in a client key is a warning at start-up: a key is all that stands
# between the network and the providers' bill, and a short one falls to trying (a 2-character
# key to 4,000 guesses; `secrets.token_urlsafe(32)` gives 43 characters).
MIN_CLIENT_KEY_CHARS = 16


def weak_key_warnings(keys: tuple[ApiKeySpec, ...], environ: Mapping[str, str]) -> list[str]:
    """The `api_keys` entries whose key (`env:NAME`, set) is shorter than
    `MIN_CLIENT_KEY_CHARS`, each named by its place and variable, never by its value. A
    `key_sha256` entry cannot be judged: its key is not in the config."""
    found = []
    for index, spec in enumerate(keys):
        value = environ.get(spec.key.removeprefix("env:"), "") if spec.key is not None else ""
        if 0 < len(value) < MIN_CLIENT_KEY_CHARS:
            found.append(f"api_keys[{index}].key ({spec.key}) is {len(value)} characters, "
                         f"guessable by trying: use at least {MIN_CLIENT_KEY_CHARS} random ones "
                         "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return found


def _principals(keys: tuple[ApiKeySpec, ...], environ: Mapping[str, str],
                problems: list[str]) -> dict[str, Principal]:
    """Principals by key digest. Two entries whose keys turn out the same (two variables
    holding one value, or a `key` whose digest another entry's `key_sha256` gives) are a
    problem: which tenant the key maps to would depend on the order of the list."""
    found: dict[str, Principal] = {}
    first_entry: dict[str, str] = {}
    for index, spec in enumerate(keys):
        digest = spec.key_sha256
        entry = f"api_keys[{index}] ({spec.key if spec.key is not None else 'key_sha256'})"
        if spec.key is not None:
            secret = _secret(spec.key, environ, f"api_keys[{index}].key", problems)
            digest = key_digest(secret) if secret else None
        if digest is None:
            continue
        if digest in first_entry:
            problems.append(f"{entry}: the same key as {first_entry[digest]}; "
                            "a key maps to one tenant")
            continue
        first_entry[digest] = entry
        found[digest] = Principal(spec.tenant, tuple(sorted(spec.scopes)),
                                  risk_hints_may_lower=spec.risk_hints == "may_lower")
    return found


def facts_version(facts: Mapping[str, Sequence[DeploymentFacts]]) -> str:
    """12 hex digits over the resolved facts of deployments (prices, windows, capabilities),
    by model name."""
    text = repr(sorted((model, tuple(of)) for model, of in facts.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _facts(config: RouterConfig,
           deployments: Mapping[str, Deployment]) -> dict[str, tuple[DeploymentFacts, ...]]:
    """Per logical model, what eligibility needs of each of its deployments."""
    return {model.name: tuple(DeploymentFacts(
        name=name, model=model.name, context_window=d.context_window,
        max_output_tokens=d.max_output_tokens,
        supports_tools=d.supports_tools, supports_json=d.supports_json,
        zero_data_retention=d.zero_data_retention, price_in_per_m=d.worst_prompt_price_per_mtok,
        price_in_1h_per_m=d.worst_prompt_price_1h_per_mtok,
        price_out_per_m=d.output_price_per_mtok, supports_n=d.supports_n,
        supports_logprobs=d.supports_logprobs, max_temperature=d.max_temperature,
        takes_blank_stop=not anthropic_model(d.model),
        supports_functions=d.supports_functions, supports_json_object=d.supports_json_object,
        supports_schema_with_tools=d.supports_schema_with_tools, passes_tools=d.passes_tools,
        supports_tool_choice=d.supports_tool_choice, supports_stop=d.supports_stop,
        supports_audio_input=d.supports_audio_input,
        supports_audio_output=d.supports_audio_output)
        for name in model.deployments for d in (deployments[name],))
        for model in config.models}


def resolve(config: RouterConfig, environ: Mapping[str, str], prices: PriceTable,
            *artifact_versions: str, quality: QualityTable | None = None,
            learned: Mapping[str, LoadedRouter] | None = None,
            cached_prices: CachedPriceTable = lambda _model: None,
            write_prices: CachedPriceTable = lambda _model: None,
            write_1h_prices: CachedPriceTable = lambda _model: None,
            litellm_passes: ModelCapability = lambda _model, _field: True) -> RuntimeConfig:
    """Resolve secrets and prices. Artifact versions (the classifier's, the eval reports')
    join the config's content hash in the policy version. `litellm_passes`: whether litellm
    passes a request field on to a model's provider (`litellm_adapter.passes_field`), for the
    litellm-adapter deployments whose `supports_n` / `supports_logprobs` the config leaves
    unset."""
    problems: list[str] = []
    deployments = {d.name: _deployment(d, environ, prices, problems, cached_prices, write_prices,
                                       write_1h_prices, litellm_passes)
                   for d in config.deployments}
    principals = _principals(config.api_keys, environ, problems)
    if problems:
        raise ConfigError(problems)
    table = quality if quality is not None else QualityTable.empty()
    routers = dict(learned) if learned is not None else {}
    facts = _facts(config, deployments)
    return RuntimeConfig(
        source=config,
        # The deployments' facts as resolved join it: prices and capabilities the config
        # leaves to litellm's table change routing with the litellm upgrade that changes them
        # (the policies audit: the first model changed under one version).
        version=content_hash(config, *artifact_versions, table.version, facts_version(facts),
                             *(routers[k].version for k in sorted(routers))),
        config_version=config_hash(config),
        deployments=MappingProxyType(deployments),
        model_facts=MappingProxyType(facts),
        models=MappingProxyType({m.name: m.deployments for m in config.models}),
        aliases=frozenset(config.routes.aliases),
        default_model=config.routes.default_model,
        model_by_task=MappingProxyType(dict(config.routes.by_task)),
        principals=MappingProxyType(principals),
        max_body_bytes=config.server.max_body_bytes,
        max_body_bytes_in_flight=config.server.max_body_bytes_in_flight,
        request_timeout_s=config.server.request_timeout_s,
        quality=table,
        learned=MappingProxyType(routers),
        arm_policies=MappingProxyType(arm_policies(config)),
        price_warnings=tuple(price_warnings(config.deployments, prices)),
        key_warnings=tuple(weak_key_warnings(config.api_keys, environ)),
    )


# A configured price this many times above or below litellm's for the same model reads as
# another unit: per token (10^6 x below), per 1K tokens (10^3 x below).
PRICE_RATIO_WARNED = 100.0


def price_warnings(specs: Iterable[DeploymentSpec], prices: PriceTable) -> list[str]:
    """One line per configured price `PRICE_RATIO_WARNED` times off litellm's price of the same
    model: `min_cost` sent every request to a model priced per token in a per-1M field (10^6
    times cheaper than it is), and no cost ceiling ever held it (the misconfiguration audit of
    2026-12-06). A price of 0 (self-hosted, paid otherwise) is not compared."""
    found = []
    for spec in specs:
        listed = prices(spec.model)
        if listed is None:
            continue
        for field, configured, known in (
                ("input_price_per_mtok", spec.input_price_per_mtok, listed[0]),
                ("output_price_per_mtok", spec.output_price_per_mtok, listed[1])):
            if not configured or not known:
                continue
            ratio = configured / known
            if 1.0 / PRICE_RATIO_WARNED <= ratio <= PRICE_RATIO_WARNED:
                continue
            how = (f"{1.0 / ratio:,.0f} times below" if ratio < 1.0
                   else f"{ratio:,.0f} times above")
            found.append(f"deployments.{spec.name}.{field}: {configured:g} is {how} litellm's "
                         f"{known:g} for {spec.model!r}: prices are USD per 1M tokens (per "
                         f"token x 1,000,000)")
    return found
