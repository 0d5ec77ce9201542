"""Attribute names (GenAI semantic conventions plus slorouter's own) and pure attribute builders.

Every value here is an id, a class, a count, a duration or a price: never prompt or completion
text. Builders read an `Outcome` and its `AttemptRecord`s and return plain dicts; fields the
request path may not record yet (`trace`, `steps`, an attempt's `kind`, the experiment `arm`)
are read with defaults so telemetry works before and after they exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Protocol
from urllib.parse import urlsplit

from router.execution.attempt import AttemptRecord
from router.outcomes import CLIENT_CLOSED, UNKNOWN_MODEL, Outcome
from router.telemetry.context import TraceContext

AttrValue = str | bool | int | float
Attributes = dict[str, AttrValue]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
REQUEST_STREAM = "gen_ai.request.stream"
CHOICE_COUNT = "gen_ai.request.choice.count"  # `n`, set when it is not 1
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
ERROR_TYPE = "error.type"
ERROR_CODE = "slorouter.error_code"  # the error body's `code` (docs/errors.md): a closed set
INPUT_MESSAGES, OUTPUT_MESSAGES = "gen_ai.input.messages", "gen_ai.output.messages"
HTTP_STATUS = "http.response.status_code"
SERVER_ADDRESS, SERVER_PORT = "server.address", "server.port"

TASK, RISK = "slorouter.task", "slorouter.risk"
POLICY_VERSION = "slorouter.policy_version"
CACHE, ARM, COST = "slorouter.cache", "slorouter.arm", "slorouter.cost_usd"
# the arm's route could not serve, control's answered (the `x-slorouter-arm-degraded` header)
ARM_DEGRADED = "slorouter.arm.degraded"
COST_ESTIMATED = "slorouter.cost.estimated"  # the cost is the router's estimate, not usage priced
REQUEST_ID, TENANT = "slorouter.request_id", "slorouter.tenant"
DEPLOYMENT, MODEL = "slorouter.deployment", "slorouter.model"
ATTEMPTS, ATTEMPT_NUMBER = "slorouter.attempts", "slorouter.attempt.number"
ATTEMPT_KIND = "slorouter.attempt.kind"
# candidates passed over: their circuit was open, or they were at their max_in_flight
SKIPPED = "slorouter.skipped_deployments"
# hedges that were due and not sent, by why: hedge_budget_exhausted, deployment_saturated or
# circuit_open (comma-separated when several races of one request each skipped theirs)
HEDGE_SKIPPED = "slorouter.hedge.skipped"
# how long the first attempt had to give its first content before a hedge was due (ms); set
# only on a request that was to be hedged
HEDGE_DELAY = "slorouter.hedge.delay_ms"
# the kind (retry or fallback) of an attempt that was due after a failure and that the retry
# budget refused: the request ended there with the failures before it
RETRY_REFUSED = "slorouter.retry_budget.refused"
ATTEMPT_OUTCOME = "slorouter.attempt.outcome"
CLIENT_GONE = "slorouter.client_disconnected"
EXPLORED = "slorouter.route.explored"
# answered from the record of an earlier request with the same Idempotency-Key
IDEMPOTENT_REPLAY = "slorouter.idempotent_replay"

# litellm provider prefixes → the semantic conventions' well-known `gen_ai.provider.name`
# (the GenAI registry's list); a prefix of another of litellm's routes to the same provider
# (its text-completion or beta API) maps to that provider: unmapped, `cohere_chat` or
# `vertex_ai_beta` was a provider name of its own in spans and metric labels.
_PROVIDERS = {
    "openai": "openai", "text-completion-openai": "openai",
    "anthropic": "anthropic", "anthropic_text": "anthropic",
    "azure": "azure.ai.openai", "azure_text": "azure.ai.openai",
    "azure_ai": "azure.ai.inference", "bedrock": "aws.bedrock", "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai", "vertex_ai_beta": "gcp.vertex_ai",
    "cohere": "cohere", "cohere_chat": "cohere",
    # Codestral is Mistral AI's, served from its own endpoint (codestral.mistral.ai)
    "mistral": "mistral_ai", "codestral": "mistral_ai", "text-completion-codestral": "mistral_ai",
    "groq": "groq", "deepseek": "deepseek", "xai": "x_ai", "perplexity": "perplexity",
    "watsonx": "ibm.watsonx.ai", "watsonx_text": "ibm.watsonx.ai", "moonshot": "moonshot_ai",
}


class DeploymentInfo(Protocol):
    """What telemetry needs of a deployment (a `router.providers.base.Deployment` fits)."""

    @property
    def provider(self) -> str: ...

    @property
    def upstream_model(self) -> str: ...

    @property
    def api_base(self) -> str | None: ...


def provider_name(litellm_provider: str) -> str:
    return _PROVIDERS.get(litellm_provider, litellm_provider)


@lru_cache(maxsize=256)
def server_of(api_base: str | None) -> tuple[str, int] | None:
    """The host and port an `api_base` URL names (its scheme's default port when it names
    none); None without one (litellm's own endpoint for the provider) or for a URL without a
    host. Never its path, query or credentials."""
    if not api_base:
        return None
    try:
        url = urlsplit(api_base)
        host, port = url.hostname, url.port
    except ValueError:  # a port out of range or not a number
        return None
    if not host:
        return None
    return host, port if port is not None else (443 if url.scheme == "https" else 80)


def trace_of(outcome: Outcome) -> TraceContext | None:
    value = getattr(outcome, "trace", None)
    return value if isinstance(value, TraceContext) else None


def steps_of(outcome: Outcome) -> Sequence[tuple[str, float, float]]:
    """Timed steps before execution, (name, started_at, ended_at): auth, admission, classify…"""
    value = getattr(outcome, "steps", None)
    return value if isinstance(value, list) else ()


def content_attributes(outcome: Outcome) -> Attributes:
    """Request and response text, only for tenants opted in (the caller checks the opt-in).

    Reads `outcome.captured_input` / `outcome.captured_output` (JSON strings of the messages),
    which the request path records only for opted-in tenants.
    """
    attrs: Attributes = {}
    for key, name in ((INPUT_MESSAGES, "captured_input"), (OUTPUT_MESSAGES, "captured_output")):
        value = getattr(outcome, name, None)
        if isinstance(value, str):
            attrs[key] = value
    return attrs


def arm_of(outcome: Outcome) -> str | None:
    """`experiment/arm`, as the `x-slorouter-arm` header names it: an arm's name alone
    (`control`) is every experiment's. None outside an experiment."""
    arm, experiment = getattr(outcome, "arm", None), getattr(outcome, "experiment", None)
    if not isinstance(arm, str):
        return None
    return f"{experiment}/{arm}" if isinstance(experiment, str) else arm


# `error.type` of a request whose client left before its answer ended (status 499).
CLIENT_DISCONNECTED = "client_disconnected"


# `error.type` of an upstream attempt cut before it ended: a hedge loser, or the client left.
ATTEMPT_CANCELLED = "cancelled"


def attempt_error_type(attempt: AttemptRecord) -> str | None:
    """The attempt's error class; `cancelled` for one cut before it ended (without it, hedge
    losers and abandoned attempts were counted among the successes of the operation-duration
    histogram, and shortened them), a won stream its client left included."""
    if attempt.error_class is not None:
        return attempt.error_class
    cut = attempt.outcome == "cancelled" or getattr(attempt, "abandoned", False) is True
    return ATTEMPT_CANCELLED if cut else None


# `error.type` of a request its client's own shorter timeout ended before it was a stall
# (`Outcome.cut_by_client`): the client got a 504 `deadline_exceeded`, no provider failed.
CLIENT_DEADLINE = "client_deadline"


def error_type(outcome: Outcome) -> str | None:
    """The request's error class; `client_disconnected` for a client that left before the end
    (without it, such requests were counted among the successes of the duration histogram),
    `client_deadline` for one its client's own timeout cut short (it read as the provider's
    `ProviderTimeoutError`)."""
    if getattr(outcome, "cut_by_client", False) is True:
        return CLIENT_DEADLINE
    if outcome.error_type is not None:
        return outcome.error_type
    return CLIENT_DISCONNECTED if outcome.status == CLIENT_CLOSED else None


def server_span_name(outcome: Outcome) -> str:
    """`chat {model}` (GenAI's `{operation} {request model}`) once a decision has taken the
    requested name as a configured model or alias, else `chat`: a name the client chose (an
    unknown model, answered 404) or none (a request refused before its body was read) would
    make span names as many as clients care to send."""
    if outcome.model is not None and outcome.requested_model:
        return f"chat {outcome.requested_model}"
    return "chat"


def hedge_skip_reason(attempt: AttemptRecord) -> str:
    """Why a skipped hedge was not sent: its error's code."""
    code = attempt.error.code if attempt.error is not None else None
    return code or "unknown"


def made(attempt: AttemptRecord) -> bool:
    """Whether the attempt was made: not passed over because its deployment's circuit was open
    or it was at its `max_in_flight`, nor a hedge, retry or fallback that was due and not sent
    (such a record has no upstream call to be a span or an operation's duration)."""
    return attempt.outcome != "skipped"


def attempt_kind(attempts: Sequence[AttemptRecord], index: int) -> str:
    """first | retry (same deployment again) | fallback (another one) | hedge."""
    attempt = attempts[index]
    explicit = getattr(attempt, "kind", None)  # recorded by the runner; "first" is its default
    if isinstance(explicit, str) and (index == 0 or explicit != "first"):
        return explicit
    if getattr(attempt, "hedge", False) is True:
        return "hedge"
    if index == 0:
        return "first"
    return "retry" if attempts[index - 1].deployment == attempt.deployment else "fallback"


def metric_error_code(outcome: Outcome) -> str | None:
    """The error's code as a metric label: the router's own codes (docs/errors.md, a closed
    set), and `upstream_rejected` for a request an upstream refused with a code of its own
    (relayed to the client as it came: any identifier a provider chooses would be a new series
    of every request histogram). Spans keep the upstream's code."""
    code = outcome.error_code
    if code is not None and outcome.error_type == "ProviderRejectedError" and \
            code not in _ROUTERS_REJECTION_CODES:
        return "upstream_rejected"
    return code


# The codes of `ProviderRejectedError` the router gives itself (others are an upstream's own).
_ROUTERS_REJECTION_CODES = frozenset({"upstream_rejected", "adapter_rejected",
                                      "context_length_exceeded", "content_policy_violation"})


def provider_deployment(outcome: Outcome) -> str | None:
    """The deployment whose provider a request is counted under: the one that answered, else
    the last one an attempt was made to (a request every attempt of which failed is the
    provider's failure; counted under `none` it could not be told apart by provider), else
    none (refused before any attempt)."""
    if outcome.deployment is not None:
        return outcome.deployment
    tried = [a for a in outcome.attempts if made(a)]
    return tried[-1].deployment if tried else None


def generating_deployment(outcome: Outcome) -> str | None:
    """The deployment whose model generated the request's answer: its attempt that answered,
    or a cache hit's stored answer's. None when attempts were made and none answered: a
    non-streamed request its client left names the attempt it cancelled in flight in
    `deployment` (for its span), and that attempt generated nothing, so it has no
    `gen_ai.response.model` (its attempt span had none either)."""
    if outcome.deployment is None:
        return None
    if outcome.winner is None and any(made(a) for a in outcome.attempts):
        return None
    return outcome.deployment


def put_if(attrs: Attributes, key: str, value: AttrValue | None) -> None:
    if value is not None:
        attrs[key] = value


def _provider_of(name: str | None, deployments: Mapping[str, DeploymentInfo]) -> str | None:
    info = deployments.get(name) if name is not None else None
    return provider_name(info.provider) if info is not None else None


def server_attributes(outcome: Outcome, deployments: Mapping[str, DeploymentInfo]) -> Attributes:
    """Attributes of the request's server span (and, in part, of its metrics)."""
    attrs: Attributes = {OPERATION: "chat", REQUEST_STREAM: outcome.stream,
                         HTTP_STATUS: outcome.sent_status,
                         REQUEST_ID: outcome.request_id, TENANT: outcome.tenant,
                         CACHE: outcome.cache,
                         ATTEMPTS: sum(1 for a in outcome.attempts if made(a))}
    put_if(attrs, REQUEST_MODEL, outcome.requested_model or None)  # none before the body
    skipped = [a for a in outcome.attempts if not made(a)]
    if skipped:
        passed_over = [a.deployment for a in skipped if a.passed_over]
        if passed_over:
            attrs[SKIPPED] = ",".join(passed_over)
        hedges = [hedge_skip_reason(a) for a in skipped if a.kind == "hedge"]
        if hedges:
            attrs[HEDGE_SKIPPED] = ",".join(hedges)
        refused = next((a.kind for a in skipped if a.refused_by_retry_budget), None)
        if refused is not None:  # the request ended there: at most one
            attrs[RETRY_REFUSED] = refused
    # the deployment that answered: this request's, or a replay's first request's
    answered = outcome.deployment if outcome.deployment is not None else outcome.replayed_from
    generated = generating_deployment(outcome) or outcome.replayed_from
    info = deployments.get(generated) if generated is not None else None
    if info is not None:
        attrs[RESPONSE_MODEL] = info.upstream_model
    put_if(attrs, PROVIDER, _provider_of(answered or provider_deployment(outcome), deployments))
    for key, value in ((TASK, outcome.task), (RISK, outcome.risk), (MODEL, outcome.model),
                       (DEPLOYMENT, answered), (POLICY_VERSION, outcome.policy_version),
                       (ARM, arm_of(outcome)), (ERROR_TYPE, error_type(outcome)),
                       (ERROR_CODE, outcome.error_code),
                       (INPUT_TOKENS, outcome.prompt_tokens),
                       (OUTPUT_TOKENS, outcome.reported_completion_tokens),
                       (COST, outcome.cost_usd)):
        put_if(attrs, key, value)
    if outcome.choices != 1:
        attrs[CHOICE_COUNT] = outcome.choices
    if outcome.cost_estimated:
        attrs[COST_ESTIMATED] = True
    if outcome.client_disconnected:
        attrs[CLIENT_GONE] = True
    if outcome.explored:
        attrs[EXPLORED] = True
    if outcome.arm is not None and outcome.arm_degraded:
        attrs[ARM_DEGRADED] = True
    if outcome.hedge_delay_s is not None:
        attrs[HEDGE_DELAY] = round(outcome.hedge_delay_s * 1000.0, 1)
    if getattr(outcome, "idempotent_replay", False) is True:
        attrs[IDEMPOTENT_REPLAY] = True
    return attrs


def attempt_attributes(attempts: Sequence[AttemptRecord], index: int,
                       deployments: Mapping[str, DeploymentInfo],
                       stream: bool = True) -> Attributes:
    """Attributes of one upstream attempt's client span; `gen_ai.response.time_to_first_chunk`
    for a stream's only (GenAI's definition: a whole answer has no chunks)."""
    attempt = attempts[index]
    attrs: Attributes = {OPERATION: "chat", DEPLOYMENT: attempt.deployment,
                         ATTEMPT_NUMBER: attempt.number,
                         ATTEMPT_KIND: attempt_kind(attempts, index)}
    ended_as = getattr(attempt, "outcome", None)  # won | failed | cancelled | … when recorded
    info = deployments.get(attempt.deployment)
    if info is not None:
        attrs[PROVIDER] = provider_name(info.provider)
        attrs[REQUEST_MODEL] = info.upstream_model
        if ended_as == "won":
            attrs[RESPONSE_MODEL] = info.upstream_model
        server = server_of(info.api_base)
        if server is not None:
            attrs[SERVER_ADDRESS], attrs[SERVER_PORT] = server
    put_if(attrs, ERROR_TYPE, attempt_error_type(attempt))
    if attempt.error is not None:
        put_if(attrs, ERROR_CODE, attempt.error.code)
    if stream:
        put_if(attrs, TIME_TO_FIRST_CHUNK, attempt.ttft_s)
    if isinstance(ended_as, str):
        attrs[ATTEMPT_OUTCOME] = ended_as
    if attempt.usage is not None:
        attrs[INPUT_TOKENS] = attempt.usage.prompt_tokens
        attrs[OUTPUT_TOKENS] = attempt.usage.completion_tokens
    if attempt.cost_usd is not None:  # what the provider may bill for this attempt
        attrs[COST] = attempt.cost_usd
        if attempt.cost_estimated:
            attrs[COST_ESTIMATED] = True
    return attrs


def metric_labels(outcome: Outcome, deployments: Mapping[str, DeploymentInfo]) -> Attributes:
    """The low-cardinality subset used on request metrics (no ids, no tenant)."""
    decided = outcome.model is not None  # a client's unknown model name is not a label value
    labels: Attributes = {OPERATION: "chat",
                          PROVIDER: _provider_of(provider_deployment(outcome), deployments)
                          or "none",
                          REQUEST_MODEL: outcome.requested_model if decided else UNKNOWN_MODEL}
    generated = generating_deployment(outcome)
    info = deployments.get(generated) if generated is not None else None
    if info is not None:
        labels[RESPONSE_MODEL] = info.upstream_model
    put_if(labels, TASK, outcome.task)
    # hit | miss | bypass | stale: a stored answer's "first token" is no provider's
    labels[CACHE] = outcome.cache
    put_if(labels, ERROR_TYPE, error_type(outcome))
    put_if(labels, ERROR_CODE, metric_error_code(outcome))
    return labels
