"""Small builders shared by the cache tests: completion bodies, scopes and requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from cache.keys import CacheScope


def completion_body(
    content: str | None = "Paris.",
    *,
    finish_reason: str | None = "stop",
    tool_calls: Sequence[Mapping[str, object]] | None = None,
    model: str = "gpt-4o-mini-2024-07-18",
    usage: Mapping[str, object] | None = None,
) -> bytes:
    """A chat.completion body as a provider would send it."""
    message: dict[str, object] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls is not None:
        message["tool_calls"] = list(tool_calls)
    body: dict[str, object] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": "fp_test",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if usage is not None:
        body["usage"] = dict(usage)
    return orjson.dumps(body)


def scope(
    tenant: str = "acme",
    scopes: frozenset[str] = frozenset({"docs:read"}),
    locale: str = "en-US",
    policy_version: str = "pv1",
    models: frozenset[str] = frozenset({"gpt-4o-mini"}),
    data_version: str | None = "dv1",
) -> CacheScope:
    """A scope with overridable parts."""
    return CacheScope(tenant, scopes, locale, policy_version, models, data_version)


def request(**overrides: object) -> dict[str, object]:
    """A deterministic (temperature 0) chat request with overridable fields."""
    fields: dict[str, object] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Capital of France?"},
        ],
        "temperature": 0,
    }
    fields.update(overrides)
    return fields
