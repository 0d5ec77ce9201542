"""The litellm adapter: any provider litellm supports, behind our `Provider` seam.

This is the only module that imports litellm (imported only when a deployment uses this adapter;
prices come from `price_table`, which reads litellm's table without importing it). It turns
litellm's response objects back into OpenAI wire JSON. litellm is told to use its bundled price
map: nothing may be fetched from the network at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, Protocol

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")

import httpx
import litellm

from router.execution import late_timers
from router.providers import lone_surrogates
from router.providers.base import (
    Completion,
    Deployment,
    StreamEvent,
    UpstreamCall,
    Usage,
    chunk_event,
    not_an_event_stream,
    speaks_openai_wire,
    with_usage,
)
from router.providers.error_text import without_key
from router.providers.exception_mapping import broken_after_head, map_exception
from router.providers.upstream_answers import not_a_stream
from router.telemetry.redact import without_arguments

litellm.telemetry = False
litellm.suppress_debug_info = True
# litellm ends a stream whose last 100 chunks carry the same text (over 2 characters) with an
# error, taking it for a model caught in a loop. Models write such runs in whole answers (a long
# dashed rule, a column of zeros), which pass-through relays as they are; a runaway stream is
# bounded by the request's deadline and the deployment's `timeout_s` instead.
litellm.REPEATED_STREAMING_CHUNK_LIMIT = sys.maxsize  # type: ignore[attr-defined]
# litellm's loggers write through a handler of their own (plain text, past the service's
# formatter and redaction) and log exceptions as arguments (`Exception occured - %s`: a
# pydantic error quoting a provider's malformed chunk, that is, the answer's text). Their
# records go to the service's handlers only, without their arguments (dropped first: litellm's
# own logger filters write the arguments into the message).
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
    logging.getLogger(_name).handlers.clear()
    logging.getLogger(_name).filters.insert(0, without_arguments)

# The OpenAI Chat Completions request fields that litellm takes as keyword arguments of the same
# name and meaning (it translates them for other providers). Every other field of the client's
# body reaches the provider as a request field (`extra_body`), never as a keyword: litellm's
# other keywords say where the call goes and with which key (`base_url`, `api_base`, `api_key`),
# answer without calling (`mock_response`), call other models (`fallbacks`, `model_list`) or
# change what the call costs, and none of that is the client's to choose. `model`, `stream` and
# `stream_options` are the router's; `metadata` is litellm's own (its logging), not OpenAI's.
_ARGUMENTS = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "messages", "modalities", "n", "parallel_tool_calls",
    "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_retention",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
    "store", "temperature", "thinking", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options"})
_NOT_FORWARDED = frozenset({"metadata", "stream", "stream_options", "model"})
# Sampling fields outside OpenAI's list that litellm passes to a provider off OpenAI's wire as
# that provider's own (Anthropic's, Gemini's, Bedrock's, Cohere's `top_k`), given as litellm's
# arguments for those providers only: in `extra_body` they reached Anthropic nested under a
# literal `extra_body` key, which it refuses (400 "Extra inputs are not permitted"; the
# Anthropic audit of 2026-12-07). None of them is a litellm argument of its own.
_PROVIDER_SAMPLING = frozenset({"top_k"})


# litellm providers that run the model inside this process, from a package the router does not
# ship (every call fails), and the server provider that was meant.
_IN_PROCESS = {"vllm": "hosted_vllm"}
# Providers litellm reaches only at a configured address, and the variable it also reads: without
# either, hosted_vllm sends the prompts to api.openai.com (with a placeholder key), and azure and
# azure_ai (an Azure AI Foundry resource's own endpoint) fail every call.
_ADDRESS_VARIABLE = {"hosted_vllm": "HOSTED_VLLM_API_BASE", "azure": "AZURE_API_BASE",
                     "azure_ai": "AZURE_AI_API_BASE"}


class _Served(Protocol):
    """What `provider_problems` reads of a deployment: a resolved one or its config spec."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def adapter(self) -> str: ...
    @property
    def api_base(self) -> str | None: ...


def provider_problems(deployments: Iterable[_Served],
                      environ: Mapping[str, str] = os.environ) -> list[str]:
    """One line per litellm-adapter deployment that no call could serve: a model string that
    names no provider litellm knows, a provider litellm runs in-process (`vllm/`), or a server
    provider with no address (`api_base`, nor litellm's variable for it). Reported at start-up,
    not on the first request."""
    problems = []
    for deployment in deployments:
        if deployment.adapter != "litellm":
            continue
        name = f"deployments.{deployment.name}"
        try:
            provider = litellm.get_llm_provider(deployment.model, api_base=deployment.api_base)[1]
        except Exception:  # litellm raises its BadRequestError for an unknown provider
            problems.append(f"{name}: litellm cannot tell the provider of model "
                            f"{deployment.model!r}; write it as provider/model, e.g. "
                            f"openai/{deployment.model.split('/')[-1]}")
            continue
        if provider in _IN_PROCESS:
            problems.append(f"{name}: litellm's {provider}/ runs the model inside this process, "
                            f"which the router does not do; for a server write "
                            f"{_IN_PROCESS[provider]}/{deployment.model.split('/', 1)[-1]} with "
                            "its api_base")
        variable = _ADDRESS_VARIABLE.get(provider)
        if variable is not None and not deployment.api_base and not environ.get(variable):
            problems.append(f"{name}: {deployment.model!r} needs the server's address: set the "
                            f"deployment's api_base (or {variable}); without it "
                            + ("litellm would send its requests to api.openai.com"
                               if provider == "hosted_vllm" else "every call fails"))
    return problems


def unsized_output_problems(deployments: Iterable[Deployment]) -> list[str]:
    """One line per deployment that needs an output limit on every request (Anthropic's
    `max_tokens`), has no `max_output_tokens`, and whose model litellm's table does not size:
    a request without `max_tokens` goes out with litellm's fallback of 128,000, which the
    provider refuses for a model that writes less (a 400 for the plainest request)."""
    problems = []
    for deployment in deployments:
        if not deployment.output_limit_required or deployment.max_output_tokens is not None:
            continue
        try:
            known = litellm.get_max_tokens(deployment.model)
        except Exception:  # litellm raises a bare Exception for a model it does not list
            known = None
        if known is None:
            problems.append(
                f"deployments.{deployment.name}: litellm does not know how many tokens "
                f"{deployment.model!r} may write, so a request without max_tokens would be sent "
                f"its fallback of 128000, which the provider refuses; set max_output_tokens")
    return problems


def passes_field(model: str, field: str) -> bool:
    """Whether litellm sends the request field `field` (`n`, `logprobs`, `functions`) on to the
    provider of `model` (a litellm model string), or carries a JSON mode there (`field` one of
    `router.runtime_config`'s `JSON_OBJECT`, `SCHEMA_WITH_TOOLS`). With `drop_params`, which
    the adapter sets, litellm drops what a provider does not take, and Anthropic, Bedrock,
    Mistral and Ollama take neither `n` nor `logprobs`: a request for three choices would get
    one, and one for log probabilities none, answered 200. A model litellm cannot place is
    given the benefit of the doubt (its provider refuses the field itself, if it does)."""
    try:
        provider = litellm.get_llm_provider(model)[1]
        if field.startswith("response_format:"):
            return provider != "anthropic" or _carries_json_to_anthropic(model, field)
        if (provider, field) in _DROPPED_IN_TRANSLATION:
            return False
        params = litellm.get_supported_openai_params(model=model, custom_llm_provider=provider)
    except Exception:  # litellm raises its BadRequestError for an unknown provider
        return True
    return params is None or field in params


# Fields a provider's parameter list names but litellm's translation for it then drops:
# Ollama's chat API (`ollama_chat/`) loses `tool_choice` ("causes ollama requests to hang",
# litellm/llms/ollama/chat/transformation.py), so `required` or a named tool is never enforced.
_DROPPED_IN_TRANSLATION = frozenset({("ollama_chat", "tool_choice")})


_PROBE_SCHEMA = {"type": "json_schema", "json_schema": {
    "name": "probe", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}
_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "probe_tool", "parameters": {"type": "object", "properties": {}}}}]


def _carries_json_to_anthropic(model: str, mode: str) -> bool:
    """Whether litellm's translation to Anthropic's Messages API keeps a JSON mode, asked of
    its own parameter mapping for the model: a json_object `response_format` has no schema and
    maps to nothing (prose comes back), and a json_schema one beside tools maps to a forced tool
    of litellm's own (the client's tools are never called, `tool_choice: required` answers
    without a tool call), except for models where litellm uses Anthropic's native structured
    output (`output_format`: the client's tools stay as they are)."""
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    asked: dict[str, Any] = ({"response_format": {"type": "json_object"}}
                             if mode.endswith("json_object")
                             else {"response_format": _PROBE_SCHEMA, "tools": _PROBE_TOOLS})
    mapped = AnthropicConfig().map_openai_params(non_default_params=asked, optional_params={},
                                                 model=model.split("/", 1)[-1], drop_params=True)
    return "output_format" in mapped


def credential_problems(deployments: Iterable[Deployment]) -> list[str]:
    """One line per litellm-adapter deployment with no `api_key` whose provider needs one that
    the environment does not hold either (litellm's `validate_environment`): every call to it
    would fail with `deployment_missing_credentials`. A warning, not an error: a provider that
    takes its key another way (a local server) would be refused wrongly."""
    problems = []
    for deployment in deployments:
        if deployment.adapter != "litellm" or deployment.api_key:
            continue
        try:
            missing = litellm.validate_environment(deployment.model).get("missing_keys") or []
        except Exception:  # a provider litellm cannot check: say nothing
            continue
        keys = [name for name in missing if "KEY" in name or "TOKEN" in name]
        if keys:
            problems.append(f"deployments.{deployment.name}: no api_key, and {' or '.join(keys)} "
                            f"is not set: every call to {deployment.model!r} will fail for "
                            "missing credentials; set the deployment's api_key")
    return problems


def exception_classes() -> list[type[BaseException]]:
    """Every exception class litellm exports (for the mapping meta-test)."""
    found = []
    for name in dir(litellm):
        value = getattr(litellm, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            found.append(value)
    return found


class LitellmProvider:
    """`Provider` through `litellm.acompletion`."""

    def _kwargs(self, call: UpstreamCall) -> dict[str, Any]:
        deployment = call.deployment
        kwargs: dict[str, Any] = {}
        extra_body: dict[str, Any] = {}
        own_wire = not speaks_openai_wire(deployment.adapter, deployment.provider)
        for key, value in call.body.items():
            if key in _ARGUMENTS or (own_wire and key in _PROVIDER_SAMPLING):
                kwargs[key] = value
            elif key not in _NOT_FORWARDED:
                extra_body[key] = value
        if extra_body:
            kwargs["extra_body"] = extra_body
        kwargs.update(model=deployment.model, timeout=_timeout(deployment), drop_params=True,
                      num_retries=0)
        if deployment.api_base:
            kwargs["api_base"] = deployment.api_base
        if deployment.api_key:
            kwargs["api_key"] = deployment.api_key
        if deployment.api_version:
            kwargs["api_version"] = deployment.api_version
        if call.headers:
            kwargs["extra_headers"] = dict(call.headers)
        return kwargs

    async def complete(self, call: UpstreamCall) -> Completion:
        try:
            # The attempt's own time left bounds it here, as a stream's does below: litellm is
            # given its deployment's fixed timeout (`_timeout`).
            async with late_timers.timeout(call.timeout_s):
                response = await litellm.acompletion(**self._kwargs(call))
        except Exception as exc:
            raise without_key(map_exception(exc), call.deployment.api_key) from exc
        body = _dump_completion(response)
        if not speaks_openai_wire(call.deployment.adapter, call.deployment.provider):
            _cut_schema_answers_say_length(body, call.body)
        usage = Usage.from_openai(body.get("usage"))
        if usage is None:  # litellm's made-up usage of no tokens: the upstream reported none
            body.pop("usage", None)
        return Completion(body=lone_surrogates.dumps(body), usage=usage)

    async def stream(self, call: UpstreamCall) -> AsyncGenerator[StreamEvent, None]:
        kwargs = self._kwargs(call)
        kwargs.update(stream=True, stream_options=with_usage(call.body.get("stream_options")))
        # One deadline over the whole answer, as the pass-through adapter has (litellm's own
        # `timeout` bounds each read only); it bounds each wait, never a span holding a `yield`.
        deadline = asyncio.get_running_loop().time() + call.timeout_s
        try:
            async with late_timers.timeout_at(deadline):
                response = await litellm.acompletion(**kwargs)
            deployment = call.deployment
            if speaks_openai_wire(deployment.adapter, deployment.provider) and not_an_event_stream(
                    _content_type(response)):
                # litellm reads such a body (an HTML page) as a stream without events and
                # makes up a finish chunk for it: an empty answer that would count as served
                await response.aclose()
                raise not_a_stream()
            chunks = aiter(response)
            first_read = True
            try:
                while True:
                    try:
                        async with late_timers.timeout_at(deadline):
                            chunk = await anext(chunks)
                    except StopAsyncIteration:
                        return
                    except Exception as exc:  # the upstream had it: see broken_after_head
                        raise broken_after_head(exc, first_read) from exc
                    first_read = False
                    body = _dump_chunk(chunk)
                    if not body.get("choices") and not body.get("usage"):
                        # Azure's prompt-filter chunk, its results taken out by litellm: no
                        # choice, no usage, `id` and `model` empty; an SDK's stream helper
                        # took those for the answer's (`id=''`, `model=''`).
                        continue
                    yield chunk_event(lone_surrogates.dumps(body), body)
            finally:
                # Closed here, also when the consumer lets go at a `yield` (the client left or
                # stopped reading, a hedge lost): left to the garbage collector, the upstream
                # kept writing (and billing) the answer for minutes, its connection held.
                with contextlib.suppress(Exception):
                    await response.aclose()
        except Exception as exc:
            raise without_key(map_exception(exc), call.deployment.api_key) from exc

    async def aclose(self) -> None:
        return None


def _timeout(deployment: Deployment) -> httpx.Timeout:
    """The deployment's `connect_timeout_s` for opening the connection, and no bound of
    litellm's own on anything after it: the attempt's time left is enforced around the call
    (`complete`, `stream`), by a timer that a pause of the process does not turn against an
    answer that arrived meanwhile (`late_timers`). httpx's read timeout is an ordinary timer:
    after a pause longer than `timeout_s` it fired before the answer waiting on the socket was
    read, and the deployment was blamed for it (the second re-audit of 2026-12-06: 20 answers
    dropped, the breaker open). One value per deployment, never the attempt's time left:
    litellm keys its cache of provider clients by the timeout, so a timeout that differed per
    call built a new client, connection pool and session for every request (a soak counted
    ~650 upstream connections closed a minute at 25 req/s). litellm passes an `httpx.Timeout`
    through only for the providers whose client takes one (`litellm.utils.
    supports_httpx_timeout`: openai, azure, bedrock); for the others (anthropic among them) it
    takes the read part alone, here none, and uses its fallback (600 s): connecting is then
    bounded by the attempt's timer."""
    return httpx.Timeout(None, connect=min(deployment.connect_timeout_s, deployment.timeout_s))


def _content_type(response: Any) -> str | None:
    """The upstream's `content-type` as litellm keeps its response headers (prefixed
    `llm_provider-`, in `_hidden_params["additional_headers"]`); None when it kept none."""
    hidden = getattr(response, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    if not isinstance(headers, dict):
        return None
    for name, value in headers.items():
        if str(name).lower() == "llm_provider-content-type":
            return str(value)
    return None


def _dump(obj: Any) -> dict[str, Any]:
    """litellm's answer or chunk as a dict, without litellm's own additions: `usage.cost` (its
    table's price of the answer, which contradicted the deployment's price the router bills
    by) and a choice's `provider_specific_fields` when it holds nothing."""
    dumped = obj.model_dump() if hasattr(obj, "model_dump") else dict(obj)
    body = {k: v for k, v in dumped.items() if v is not None or k in ("content",)}
    usage = body.get("usage")
    if isinstance(usage, dict):
        usage.pop("cost", None)
    choices = body.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and "provider_specific_fields" in choice:
            extra = choice["provider_specific_fields"]
            if extra is None or (isinstance(extra, dict) and not _present(extra)):
                del choice["provider_specific_fields"]
    return body


def _dump_chunk(chunk: Any) -> dict[str, Any]:
    """A streamed chunk as OpenAI sends it. litellm's delta model spells every field it knows,
    null where the chunk had none (`role` after the first chunk, `function_call`, `audio`,
    `provider_specific_fields`, `tool_calls` on the finish chunk, a tool call's `id` and
    `name` in its argument fragments, and a legacy `function_call`'s `name` in its);
    OpenAI sends only what a chunk carries, and a client that merges deltas field by field
    would copy the nulls into its message."""
    body = _dump(chunk)
    choices = body.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict):
            choice["delta"] = _present(delta)
            function_call = choice["delta"].get("function_call")
            if isinstance(function_call, dict):
                choice["delta"]["function_call"] = _present(function_call)
            calls = choice["delta"].get("tool_calls")
            if isinstance(calls, list):
                choice["delta"]["tool_calls"] = [
                    {k: _present(v) if isinstance(v, dict) else v
                     for k, v in _present(call).items()} if isinstance(call, dict) else call
                    for call in calls]
    return body


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


_MESSAGE_NULLS = frozenset({"content", "refusal"})  # null in OpenAI's messages too


def _cut_schema_answers_say_length(body: dict[str, Any], request: Mapping[str, Any]) -> None:
    """A `json_schema` answer cut at its output limit says `length`. litellm asks a provider
    of its own wire (Anthropic) for such an answer through a forced tool and reports every one
    `stop`, a truncated `{}` included (its stream says `length`): the SDKs' `parse()` read the
    cut answer as whole (the API audit of 2026-12-07). Cut: the output tokens reached the limit
    the request was sent with."""
    response_format = request.get("response_format")
    if not (isinstance(response_format, Mapping) and response_format.get("type") == "json_schema"):
        return
    limit = request.get("max_completion_tokens", request.get("max_tokens"))
    usage = body.get("usage")
    used = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    choices = body.get("choices")
    # The usage counts every choice together: with several, no one choice's length is known
    # (a provider of its own wire that answers `n` > 1, Gemini, cut none of two finished ones).
    if not (isinstance(limit, int) and isinstance(used, int) and used >= limit
            and isinstance(choices, list) and len(choices) == 1):
        return
    choice = choices[0]
    if isinstance(choice, dict) and choice.get("finish_reason") == "stop":
        choice["finish_reason"] = "length"


def _dump_completion(response: Any) -> dict[str, Any]:
    """A whole answer as OpenAI sends it. litellm's message model spells `tool_calls` and
    `function_call` as null on a text answer (OpenAI leaves them out: a client reading
    `message.get("tool_calls", [])` would get None), gives each tool call the `index` of a
    streamed delta, and adds `provider_specific_fields` whose values are all null. Its answers
    from Anthropic lack `refusal` and `logprobs`, which OpenAI sends as null and the SDKs'
    types require (TypeScript code testing `message.refusal !== null` saw a refusal)."""
    body = _dump(response)
    choices = body.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        choice.setdefault("logprobs", None)
        message.setdefault("refusal", None)
        kept = {k: v for k, v in message.items() if v is not None or k in _MESSAGE_NULLS}
        extra = kept.get("provider_specific_fields")
        if isinstance(extra, dict) and not _present(extra):
            del kept["provider_specific_fields"]
        calls = kept.get("tool_calls")
        if isinstance(calls, list):
            kept["tool_calls"] = [{k: v for k, v in call.items() if k != "index"}
                                  if isinstance(call, dict) else call for call in calls]
        choice["message"] = kept
    return body
