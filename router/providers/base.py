"""The provider seam: a resolved `Deployment`, one `UpstreamCall`, and what comes back.

A `Provider` sends one call to one deployment, as a whole response (`complete`) or as a stream
of events (`stream`). It does no retries, fallback or timing policy: the execution layer does.
Bodies cross this seam as the OpenAI wire format (JSON bytes / dicts), since that is what both
adapters speak and the client receives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from router.errors import SlorouterError

AdapterName = Literal["litellm", "openai_passthrough"]
PromptCacheKind = Literal["anthropic", "openai", "other"]
# Which of a plan's upstream bodies a deployment gets: its prompt-cache kind's, or `salted` (a
# self-hosted server's, with a `cache_salt`).
BodyKind = Literal["anthropic", "openai", "other", "salted"]
# litellm providers that speak OpenAI's wire format to a server of the operator's choosing.
_SELF_HOSTED_WIRE_PROVIDERS = frozenset({"openai", "hosted_vllm"})
# ... and those that speak it at all: Azure OpenAI too (litellm reaches it through the openai
# SDK; its streams are `text/event-stream`).
_OPENAI_WIRE_PROVIDERS = _SELF_HOSTED_WIRE_PROVIDERS | {"azure"}


@dataclass(frozen=True, slots=True)
class Deployment:
    """One concrete endpoint, with its secret resolved and its prices known."""

    name: str
    model: str  # litellm model string, e.g. "openai/gpt-4o-mini"
    adapter: AdapterName
    api_base: str | None
    api_key: str | None = field(repr=False)
    input_price_per_mtok: float
    output_price_per_mtok: float
    context_window: int | None
    max_output_tokens: int | None = None  # the model's most output per answer; None: unknown
    supports_tools: bool = True
    supports_json: bool = True
    supports_n: bool = True  # answers `n` > 1 choices
    supports_logprobs: bool = True  # answers `logprobs`
    max_temperature: float = 2.0  # the highest `temperature` the provider takes
    # What the adapter carries to the provider, each answered 200 without it when not:
    supports_functions: bool = True  # the legacy `functions` / `function_call`
    supports_json_object: bool = True  # `response_format` json_object
    supports_schema_with_tools: bool = True  # a json_schema `response_format` beside tools
    passes_tools: bool = True  # `tools` (litellm drops them for some Fireworks models)
    supports_tool_choice: bool = True  # `tool_choice` (the same)
    supports_stop: bool = True  # `stop` (litellm drops it for some xAI models)
    supports_audio_input: bool = True  # `input_audio` content parts (dropped to Anthropic)
    supports_audio_output: bool = True  # `modalities` / `audio`: a spoken answer
    zero_data_retention: bool = False
    connect_timeout_s: float = 5.0
    timeout_s: float = 120.0
    cached_input_price_per_mtok: float | None = None  # prompt-cache reads; None: full price
    cache_write_price_per_mtok: float | None = None  # prompt-cache writes; None: full price
    # Anthropic's 1-hour prompt-cache writes (a `ttl: "1h"` marker: twice the input price,
    # where a 5-minute write is 1.25 times); None: the write price
    cache_write_1h_price_per_mtok: float | None = None
    max_in_flight: int | None = None  # the bulkhead: attempts in flight at once; None: no cap
    tenant_cache_salt: bool = True  # a self-hosted server gets a per-tenant `cache_salt`
    api_version: str | None = None  # Azure OpenAI's `api-version`, through litellm
    # Derived from the fields above once, at construction (a request reads them many times).
    upstream_model: str = field(init=False, repr=False, compare=False)
    provider: str = field(init=False, repr=False, compare=False)
    prompt_cache_kind: PromptCacheKind = field(init=False, repr=False, compare=False)
    body_kind: BodyKind = field(init=False, repr=False, compare=False)
    # litellm sends Anthropic's required `max_tokens` from its own table when a body has none
    output_limit_required: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        derived = derive_names(self.model, self.api_base, self.adapter, self.tenant_cache_salt)
        for name, value in zip(("upstream_model", "provider", "prompt_cache_kind", "body_kind"),
                               derived, strict=True):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "output_limit_required",
                           self.adapter == "litellm" and anthropic_model(self.model))

    @property
    def worst_prompt_price_per_mtok(self) -> float:
        """What a prompt token may cost: the cache-write price where the router marks prompts
        for the provider's prompt cache at a premium (Anthropic's `cache_control`, written at
        1.25 times the input price on a miss; `prefix.marked_bodies`), else the input price.
        The cost ceiling's worst case and its output cap read it."""
        write = self.cache_write_price_per_mtok
        price_in = self.input_price_per_mtok
        return max(price_in, write) if self.body_kind == "anthropic" and write else price_in

    @property
    def worst_prompt_price_1h_per_mtok(self) -> float:
        """What a prompt token may cost when the client marks hour-long cache writes (Anthropic's
        `ttl: "1h"`, `cache.prefix.writes_for_an_hour`): the 1-hour write price where the
        deployment speaks Anthropic's format and has one, else `worst_prompt_price_per_mtok`."""
        worst = self.worst_prompt_price_per_mtok
        hour = self.cache_write_1h_price_per_mtok
        return max(worst, hour) if self.body_kind == "anthropic" and hour else worst

    def cost_usd(self, prompt_tokens: int, completion_tokens: int,
                 cached_tokens: int = 0, written_tokens: int = 0,
                 written_1h_tokens: int = 0) -> float:
        """Price of one answer; prompt tokens read from the provider's prompt cache are billed
        at the cached price, and those written into it (Anthropic's cache creation, 1.25 times
        the input price) at the write price, when the deployment has them; of those, the ones
        written for an hour (`written_1h_tokens`, twice the input price) at the 1-hour write
        price (they were billed as 5-minute writes until 2026-12-07: the prompt-cache audit).
        All are part of `prompt_tokens`, as upstreams in OpenAI's format count them."""
        cached = min(max(cached_tokens, 0), prompt_tokens)
        written = min(max(written_tokens, 0), prompt_tokens - cached)
        written_1h = min(max(written_1h_tokens, 0), written)
        price_in = self.input_price_per_mtok
        cached_price = (self.cached_input_price_per_mtok
                        if self.cached_input_price_per_mtok is not None else price_in)
        write_price = (self.cache_write_price_per_mtok
                       if self.cache_write_price_per_mtok is not None else price_in)
        write_1h_price = (self.cache_write_1h_price_per_mtok
                          if self.cache_write_1h_price_per_mtok is not None else write_price)
        return ((prompt_tokens - cached - written) * price_in + cached * cached_price
                + (written - written_1h) * write_price + written_1h * write_1h_price
                + completion_tokens * self.output_price_per_mtok) / 1e6

    def usage_cost_usd(self, usage: Usage) -> float:
        """`cost_usd` of an upstream's reported usage."""
        return self.cost_usd(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                             usage.cache_write_tokens, usage.cache_write_1h_tokens)


def speaks_openai_wire(adapter: AdapterName, provider: str) -> bool:
    """Whether a deployment's upstream speaks OpenAI's wire format (its streams as
    `text/event-stream`): every pass-through one, and litellm's `openai/`, `hosted_vllm/` and
    `azure/` (litellm's other providers stream in formats of their own, Bedrock's among them).
    An Azure stream that was an HTML page (a proxy's, a maintenance page) with a 200 was an
    empty answer, counted as served (the provider audit of 2026-12-07)."""
    return adapter == "openai_passthrough" or provider in _OPENAI_WIRE_PROVIDERS


def derive_names(model: str, api_base: str | None, adapter: AdapterName,
                 tenant_cache_salt: bool) -> tuple[str, str, PromptCacheKind, BodyKind]:
    """A deployment's upstream model (the name the upstream API knows: the litellm string
    without its provider prefix), provider, prompt-cache kind (how its prompt cache is
    addressed: markers, a cache key, or not) and body kind: `salted` for a self-hosted
    OpenAI-compatible server (kind `other`, on OpenAI's wire) with `tenant_cache_salt` on, which
    gets the tenant's `cache_salt` so that its automatic prefix cache (vLLM's) is shared only
    within a tenant; else the prompt-cache kind."""
    provider, rest = model.split("/", 1) if "/" in model else ("openai", model)
    kind: PromptCacheKind = "other"
    if provider == "anthropic":
        kind = "anthropic"
    elif provider == "openai" and (api_base is None or "api.openai.com" in api_base):
        kind = "openai"
    body: BodyKind = kind
    self_hosted = adapter == "openai_passthrough" or provider in _SELF_HOSTED_WIRE_PROVIDERS
    if kind == "other" and tenant_cache_salt and self_hosted:
        body = "salted"
    return rest, provider, kind, body


OPENAI_MAX_TEMPERATURE = 2.0
ANTHROPIC_MAX_TEMPERATURE = 1.0


# Providers whose Claude models take Anthropic's range (an aggregator such as OpenRouter maps
# OpenAI's range itself, so its Claude models are not among them).
_CLAUDE_HOSTS = frozenset({"bedrock", "bedrock_converse", "vertex_ai", "vertex_ai_beta"})


def anthropic_model(model: str) -> bool:
    """Whether `model` (a litellm model string) is one of Anthropic's, served by Anthropic,
    Bedrock or Vertex AI: Messages API rules apply to it (temperature 0-1, `max_tokens`
    required)."""
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return provider == "anthropic" or (provider in _CLAUDE_HOSTS and "claude" in model.lower())


def default_max_temperature(model: str) -> float:
    """The highest `temperature` the provider of `model` (a litellm model string) takes when the
    config does not say: Anthropic's models take 0-1, the rest OpenAI's 0-2."""
    return ANTHROPIC_MAX_TEMPERATURE if anthropic_model(model) else OPENAI_MAX_TEMPERATURE


# The codes of an adapter's error for a request sent and never answered: the upstream dropped
# the connection before its answer (`upstream_dropped`), the adapter's own timeout (or its
# HTTP client's read timeout) ran out waiting for it (`upstream_read_timeout`), or a stream's
# 200 head came and the line was cut before any content (`upstream_stream_cut` while the
# attempt is still pending; a cut after content is priced by the relay, with its output); all
# are given in `router.providers.exception_mapping` and `router.providers.upstream_answers`.
# The provider may have processed, and may bill, the prompt. An error the upstream answered (a
# 408 or 504 is `upstream_timeout`, a 5xx ...) is not billed, nor is a request that never left
# (a refused connection). `first_token_timeout` is the runner's name for the adapter's timeout
# before any content in a hedge race (`runner._unanswered`), priced as the adapter's code was.
_SENT_UNANSWERED = frozenset({"upstream_dropped", "upstream_read_timeout", "upstream_stream_cut",
                              "first_token_timeout"})


# The request fields that limit an answer's output tokens (`max_tokens` is the legacy name).
OUTPUT_LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")


def output_limited(body: Mapping[str, Any], most: int, *,
                   required: bool = False) -> Mapping[str, Any]:
    """`body` with its output limits lowered to `most` (a deployment's `max_output_tokens`),
    itself when none is above it: a provider refuses a limit past what the model can write
    (400), where the answer it would give is the same, cut at `most` (`finish_reason:
    length`). `required`: the provider needs a limit (Anthropic's `max_tokens`), so a body
    without one is given `most` (litellm would send its table's figure, or 128,000 for a model
    its table lacks, which the provider refuses)."""
    if required and not any(isinstance(body.get(name), int) for name in OUTPUT_LIMIT_FIELDS):
        return {**body, "max_tokens": most}
    over = [name for name in OUTPUT_LIMIT_FIELDS
            if isinstance(limit := body.get(name), int) and limit > most]
    if not over:
        return body
    return {**body, **dict.fromkeys(over, most)}


def sent_unanswered(err: SlorouterError) -> bool:
    """Whether `err` says the attempt was sent and no answer came (`_SENT_UNANSWERED`)."""
    return err.code in _SENT_UNANSWERED


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # prompt tokens written into the provider's prompt cache
    cache_write_1h_tokens: int = 0  # ... of them, written for an hour (Anthropic's `ttl: 1h`)

    @staticmethod
    def from_openai(raw: object) -> Usage | None:
        """An upstream's `usage` object; None when it sent none, one of no tokens at all, or
        something that is not one.
        A count that is not a token count (see `_token_count`) reads as 0. Prompt-cache reads
        and writes come as OpenAI's `prompt_tokens_details` or as litellm passes Anthropic's
        (`cache_read_input_tokens`, `cache_creation_input_tokens`)."""
        if not isinstance(raw, Mapping) or not raw:
            return None
        prompt = _token_count(raw.get("prompt_tokens"))
        completion = _token_count(raw.get("completion_tokens"))
        if not prompt and not completion:
            # No tokens in or out (or no readable count) is no report: litellm makes up such a
            # usage for an upstream that sent none, and every answer reads a prompt of at least
            # one token. The answer is then priced from the router's estimates.
            return None
        details = raw.get("prompt_tokens_details")
        if not isinstance(details, Mapping):
            details = {}
        # litellm's `cache_creation_token_details`, or Anthropic's own `cache_creation`
        written_by_ttl = details.get("cache_creation_token_details", raw.get("cache_creation"))
        if not isinstance(written_by_ttl, Mapping):
            written_by_ttl = {}
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=(_token_count(details.get("cached_tokens"))
                           or _token_count(raw.get("cache_read_input_tokens"))),
            cache_write_tokens=(_token_count(details.get("cache_write_tokens"))
                                or _token_count(raw.get("cache_creation_input_tokens"))),
            cache_write_1h_tokens=_token_count(written_by_ttl.get("ephemeral_1h_input_tokens")),
        )


# Above this a "count" is not one (no context window comes near), and it would not fit the
# 64-bit integers that telemetry exports.
MAX_TOKEN_COUNT = 2**40


def _token_count(value: object) -> int:
    """A token count as upstreams send it: an integer (a float for some) in [0, MAX_TOKEN_COUNT];
    anything else (strings, negatives, booleans, nested values) is 0, not an error: the answer
    itself is still good, only its accounting is unknown."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return 0


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One attempt's input. `body` is the client's request body minus `model` and `stream`."""

    deployment: Deployment
    body: Mapping[str, Any]
    timeout_s: float
    headers: Mapping[str, str] = field(default_factory=dict)
    side_effecting: bool = False  # must not reach the upstream twice (no silent re-send)


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole chat.completion as JSON bytes (passed to the client as is) and its usage."""

    body: bytes
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One chat.completion.chunk as JSON bytes, and what the router needs to know of it."""

    data: bytes
    has_content: bool
    usage: Usage | None = None
    usage_only: bool = False  # the final `choices: []` usage chunk
    finished: int = 0  # how many choices got their finish reason in this chunk
    # the chunk carries a `usage` object, one of no tokens too (which `usage` reads as none)
    reports_usage: bool = False
    # the `index` of each choice whose content the chunk carries: `n` > 1 choices' lengths are
    # told apart by them (a provider may send one choice a chunk, or every choice in each)
    content_indexes: tuple[int, ...] = ()


class Provider(Protocol):
    async def complete(self, call: UpstreamCall) -> Completion: ...

    def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]: ...

    async def aclose(self) -> None: ...


def chunk_event(data: bytes, chunk: Mapping[str, Any]) -> StreamEvent:
    """Classify a parsed chunk: content or not, usage or not. Content is any output of the
    model: text, tool or function calls, a refusal, reasoning (`reasoning_content`, as vLLM
    and DeepSeek stream it, or `reasoning`) and audio. A stream is committed, and its first
    token timed, at its first content: reasoning held back until the answer's text began
    reached the client in one burst after a silence as long as the reasoning (and a refusal,
    after the whole stream)."""
    raw_usage = chunk.get("usage")
    usage = Usage.from_openai(raw_usage)
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        choices = []  # absent, or not what OpenAI sends: no content can be read from it
    has_content = False
    finished = 0
    content_indexes: list[int] = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if isinstance(delta, Mapping) and (
                delta.get("content") or delta.get("tool_calls") or delta.get("function_call")
                or delta.get("refusal") or delta.get("reasoning_content")
                or delta.get("reasoning") or delta.get("audio")):
            has_content = True
            index = choice.get("index")
            content_indexes.append(index if isinstance(index, int)
                                   and not isinstance(index, bool) else 0)
        if isinstance(choice.get("finish_reason"), str):
            finished += 1
    reports_usage = isinstance(raw_usage, Mapping) and bool(raw_usage)
    # the final `choices: []` chunk, also when its usage reads as no report (of no tokens)
    usage_only = not choices and reports_usage
    return StreamEvent(data=data, has_content=has_content, usage=usage,
                       usage_only=usage_only, finished=finished, reports_usage=reports_usage,
                       content_indexes=tuple(content_indexes))


def not_an_event_stream(content_type: str | None) -> bool:
    """Whether a 200's `content-type` says its body is no server-sent event stream (anything but
    `text/event-stream`, parameters aside): an HTML page from a misconfigured proxy or a
    captive portal, a whole JSON answer. A 200 without the header is read as a stream."""
    if content_type is None:
        return False
    return content_type.partition(";")[0].strip().lower() != "text/event-stream"




def with_usage(options: object) -> dict[str, Any]:
    """The client's `stream_options` (`include_obfuscation`, …) with `include_usage` on: the
    router reads every stream's usage, and shows the usage chunk only to clients that asked."""
    kept = dict(options) if isinstance(options, dict) else {}
    kept["include_usage"] = True
    return kept
