"""Cache key derivation: who may see an answer, under which versions, for which exact request.

Pure functions only. `derive_key(scope, request_fields)` hashes a `CacheScope` (tenant, a hash of
the caller's permission scopes, locale, policy version, eligible model set, data version) with a
canonical form of every output-affecting field of an OpenAI chat completion request.

Every field of the OpenAI request is listed in exactly one of `KEY_FIELDS` (changes the answer,
so it is hashed) or `NON_KEY_FIELDS` (cannot change the answer's content, so it is left out; the
reason is written next to each). A field in neither set is *unknown*: `unknown_fields` reports it
and the cacheability decision bypasses the cache rather than ignoring it. A meta-test checks the
partition against the installed `openai` SDK so a new field fails CI.

Canonical form: JSON key order and insignificant whitespace never matter (the key is computed
from parsed values, re-serialized with sorted keys); a top-level `null` means "absent" (OpenAI
semantics for optional parameters); an integral float equals the integer (`0.0` == `0`). Strings
are kept byte for byte: whitespace inside a message is significant to the model.

What does not live here: deciding whether to cache (`cache.policy`), storage (`cache.result`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import orjson

KEY_SCHEMA_VERSION: Final = "v1"

KEY_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "messages",  # the prompt itself, content parts included
        "model",  # the requested model or alias (the scope also carries the eligible set)
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",  # deprecated form of tools
        "function_call",  # deprecated form of tool_choice
        "response_format",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "max_tokens",  # a lower cap can cut the answer (finish_reason "length")
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",  # the body carries logprobs only when asked
        "top_logprobs",
        "reasoning_effort",
        "verbosity",
        "modalities",
        "audio",  # voice and format of audio output
        "prediction",  # predicted output can change the tokens chosen
        "web_search_options",  # context size and user location change the answer
        "moderation",  # blocking moderation can replace the answer
    }
)

NON_KEY_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "stream",  # transport only: a cached body is replayed as SSE when the client streams
        "stream_options",  # transport only: include_usage is honoured by the replay
        "user",  # end-user id for provider abuse monitoring; the principal is in the scope
        "safety_identifier",  # same as `user`, its successor
        "metadata",  # tags for provider-side stored completions; never seen by the model
        "store",  # whether the provider stores the completion; no effect on content
        "service_tier",  # latency/price class; same model, same answer distribution
        "prompt_cache_key",  # provider prompt-cache routing hint; slorouter sets its own
        "prompt_cache_options",  # provider prompt-cache breakpoints/lifetime; no effect on content
        "prompt_cache_retention",  # provider prompt-cache lifetime; no effect on content
    }
)

_PRIMITIVE = str | int | bool | None


class UnknownFieldError(ValueError):
    """`derive_key` was asked to hash a request carrying fields in neither field set."""


@dataclass(frozen=True, slots=True)
class CacheScope:
    """Everything besides the request body that decides who may read an answer.

    `models` is the requested model or the eligible model set the policy allowed. `data_version`
    is the version of the documents behind the answer (retrieval index, ...), set by the caller.
    """

    tenant: str
    scopes: frozenset[str]
    locale: str
    policy_version: str
    models: frozenset[str]
    data_version: str | None = None

    @property
    def scopes_hash(self) -> str:
        """A stable hash of the permission scopes (order and duplicates do not matter)."""
        return _sha256(orjson.dumps(sorted(self.scopes)))

    @property
    def normalized_locale(self) -> str:
        return normalize_locale(self.locale)


def normalize_locale(locale: str) -> str:
    """BCP 47 tags compare case-insensitively; `en_US` is read as `en-US`."""
    return locale.strip().replace("_", "-").lower()


def unknown_fields(request_fields: Iterable[str]) -> frozenset[str]:
    """The request fields slorouter has not classified as in or out of the key."""
    return frozenset(request_fields) - KEY_FIELDS - NON_KEY_FIELDS


_INT64 = 2.0 ** 63


def canonical(value: object) -> object:
    """A JSON value with integral floats as ints, so `0.0` and `0` hash the same (those within
    64 bits, as JSON's integers are: `1e20` stays a float, which serialises)."""
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer() and -_INT64 <= value < _INT64:
        return int(value)
    return value


def canonical_request(request_fields: Mapping[str, object]) -> bytes:
    """The canonical bytes of the output-affecting fields of a chat completion request."""
    unknown = unknown_fields(request_fields)
    if unknown:
        raise UnknownFieldError(f"unclassified request fields: {sorted(unknown)}")
    kept = {k: canonical(v) for k, v in request_fields.items() if k in KEY_FIELDS and v is not None}
    return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)


def canonical_scope(scope: CacheScope) -> bytes:
    """The canonical bytes of a scope; the raw scopes are hashed, never stored in clear."""
    fields: dict[str, _PRIMITIVE | list[str]] = {
        "tenant": scope.tenant,
        "scopes": scope.scopes_hash,
        "locale": scope.normalized_locale,
        "policy_version": scope.policy_version,
        "models": sorted(scope.models),
        "data_version": scope.data_version,
    }
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def tenant_prefix(tenant: str) -> str:
    """The key prefix shared by one tenant's entries (lets an operator purge a tenant)."""
    return f"sr:{KEY_SCHEMA_VERSION}:{_sha256(tenant.encode())[:16]}"


def derive_key(scope: CacheScope, request_fields: Mapping[str, object]) -> str:
    """The result-cache key of a request for a scope; raises `UnknownFieldError` on new fields."""
    digest = hashlib.sha256()
    digest.update(canonical_scope(scope))
    digest.update(b"\x00")
    digest.update(canonical_request(request_fields))
    return f"{tenant_prefix(scope.tenant)}:{digest.hexdigest()}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
