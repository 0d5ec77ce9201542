"""The prefix cache: provider prompt-cache markers, cached-token accounting, prefix affinity.

Pure functions over OpenAI wire-format messages and tools (plain JSON mappings; inputs are
never mutated).

- The *stable prefix* of a request is its tools plus its leading `system`/`developer` messages;
  when it is empty, the first message stands in (a conversation then sticks to one replica).
- `mark_prefix` marks it the way the provider expects: Anthropic gets
  `cache_control: {"type": "ephemeral"}` on the last tool and on the last block of the last
  leading system or developer message (two of its four breakpoints; a request that already
  carries markers is left alone); OpenAI gets a `prompt_cache_key` that hashes the tenant with
  the prefix, so tenants never share a provider cache bucket; other providers (vLLM, ...)
  cache prefixes automatically and are left alone.
- `cache_salt` is the per-tenant salt for self-hosted servers whose automatic prefix cache
  takes one (vLLM's `cache_salt`: cached blocks are reused only between requests with the same
  salt), hashed like `prompt_cache_key` so the tenant id itself never leaves the router.
- `read_cached_tokens` reads cached prompt-token counts from a usage object (OpenAI
  `prompt_tokens_details.cached_tokens`; Anthropic `cache_read_input_tokens` and
  `cache_creation_input_tokens`, native or as litellm passes them) for cost accounting.
- `prefix_fingerprint` + `choose_replica`: rendezvous hashing with bounded load, so requests
  that share a prefix land on the deployment whose KV cache already holds it, unless that
  deployment is over `bound` times the mean load.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import orjson

from cache.keys import canonical

ProviderKind = Literal["anthropic", "openai", "other"]
Json = Mapping[str, object]

STABLE_ROLES: Final = frozenset({"system", "developer"})
EPHEMERAL: Final[Json] = {"type": "ephemeral"}


@dataclass(frozen=True, slots=True)
class MarkedRequest:
    """Messages and tools ready for the provider, plus the OpenAI `prompt_cache_key` if any."""

    messages: tuple[Json, ...]
    tools: tuple[Json, ...] | None
    prompt_cache_key: str | None = None


@dataclass(frozen=True, slots=True)
class CachedTokens:
    """Prompt tokens by how the provider's prompt cache treated them."""

    prompt_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens billed at the full input price."""
        return max(self.prompt_tokens - self.cache_read_tokens - self.cache_write_tokens, 0)


def stable_prefix_length(messages: Sequence[Json]) -> int:
    """How many leading messages are system/developer messages."""
    count = 0
    for message in messages:
        if message.get("role") not in STABLE_ROLES:
            break
        count += 1
    return count


def prefix_fingerprint(messages: Sequence[Json], tools: Sequence[Json] | None = None) -> str:
    """A hash of the stable prefix; provider markers (`cache_control`) do not change it."""
    length = stable_prefix_length(messages)
    head = list(messages[:length]) if length or tools else list(messages[:1])
    payload = {"tools": _strip_markers(list(tools or [])), "messages": _strip_markers(head)}
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _strip_markers(value: object) -> object:
    """Drop provider markers and read string content as one text part (as marking writes it)."""
    if isinstance(value, Mapping):
        return {
            k: _strip_markers(_as_parts(k, v)) for k, v in value.items() if k != "cache_control"
        }
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return canonical(value)


def _as_parts(name: str, value: object) -> object:
    return (
        [{"type": "text", "text": value}] if name == "content" and isinstance(value, str) else value
    )


def prompt_cache_key(tenant: str, fingerprint: str) -> str:
    """OpenAI's `prompt_cache_key`: per tenant (its prefix partition) and prefix, 43 characters
    (the limit is 64)."""
    return _hashed("prefix", tenant, fingerprint)


def client_prompt_cache_key(tenant: str, chosen: str) -> str:
    """The client's own `prompt_cache_key`, kept within its tenant."""
    return _hashed("client", tenant, chosen)


def cache_salt(tenant: str, chosen: str | None = None) -> str:
    """A self-hosted server's `cache_salt` for `tenant` (43 characters of `[a-z0-9-]`): the
    tenant's own, or, when the client chose a salt, that salt kept within its tenant. The two
    never equal each other or a `prompt_cache_key` (each hashes a different namespace)."""
    if chosen is None:
        return _tenant_salt(tenant)
    return _hashed("client-salt", tenant, chosen)


@functools.lru_cache(maxsize=4096)
def _tenant_salt(tenant: str) -> str:
    """A tenant's own salt, the same for each of its requests: hashed once, not per request."""
    return _hashed("salt", tenant, "")


def _hashed(namespace: str, tenant: str, value: str) -> str:
    """`sr-` and 40 hex digits of a hash of the three, as a JSON array: no two different
    triples hash the same text. Joined with NUL, as until 2026-12-07, a tenant's partition
    scoped `client-salt` and its unscoped partition's client salt `salt` hashed alike, as did a
    client's `prompt_cache_key` and another partition's automatic one (the prompt-cache
    audit)."""
    text = orjson.dumps([namespace, tenant, value])
    return "sr-" + hashlib.sha256(text).hexdigest()[:40]


def mark_prefix(
    messages: Sequence[Json],
    tools: Sequence[Json] | None,
    provider: ProviderKind,
    *,
    tenant: str,
    min_prefix_chars: int = 0,
) -> MarkedRequest:
    """The request with its stable prefix marked for `provider`'s prompt cache."""
    unchanged = MarkedRequest(tuple(messages), tuple(tools) if tools is not None else None)
    if provider == "other" or _prefix_chars(messages, tools) < max(min_prefix_chars, 1):
        return unchanged
    if provider == "openai":
        key = prompt_cache_key(tenant, prefix_fingerprint(messages, tools))
        return MarkedRequest(unchanged.messages, unchanged.tools, key)
    if _has_markers(messages, tools or ()):
        return unchanged  # the caller placed its own breakpoints
    return MarkedRequest(_mark_messages(messages), _mark_tools(tools))


def _prefix_chars(messages: Sequence[Json], tools: Sequence[Json] | None) -> int:
    stable = messages[: stable_prefix_length(messages)]
    return len(orjson.dumps(list(stable))) + (len(orjson.dumps(list(tools))) if tools else 0)


def _markers(messages: Sequence[Json], tools: Sequence[Json]) -> Iterator[object]:
    """The client's own breakpoints: the `cache_control` of a message, one of its content
    parts, a tool or its function. Only there: a tool parameter of that name (a schema's
    property) is no marker, and took the router's markers away (the prompt-cache audit of
    2026-12-07)."""
    for message in messages:
        if "cache_control" in message:
            yield message["cache_control"]
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and "cache_control" in part:
                yield part["cache_control"]
    for tool in tools:
        function = tool.get("function")
        for holder in (tool, function):
            if isinstance(holder, Mapping) and "cache_control" in holder:
                yield holder["cache_control"]


def _has_markers(messages: Sequence[Json], tools: Sequence[Json]) -> bool:
    """Whether the client placed breakpoints of its own (`_markers`)."""
    return any(True for _ in _markers(messages, tools))


def writes_for_an_hour(messages: Sequence[Json], tools: Sequence[Json] | None) -> bool:
    """Whether the client marks a prefix to be written into Anthropic's prompt cache for an
    hour (`cache_control` with `ttl: "1h"`): a miss writes it at twice the input price, not the
    1.25 times of the 5-minute writes the router marks (`Deployment.cost_usd`)."""
    return any(isinstance(marker, Mapping) and marker.get("ttl") == "1h"
               for marker in _markers(messages, tools or ()))


def _mark_tools(tools: Sequence[Json] | None) -> tuple[Json, ...] | None:
    if not tools:
        return tuple(tools) if tools is not None else None
    return (*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL})


def _mark_messages(messages: Sequence[Json]) -> tuple[Json, ...]:
    # litellm lifts the leading `system` and `developer` messages into Anthropic's system
    # (until 2026-12-07 a `developer` one was left unmarked, as if it did not)
    last = stable_prefix_length(messages) - 1
    if last < 0:
        return tuple(messages)
    marked = _mark_content(messages[last].get("content"))
    if marked is None:
        return tuple(messages)
    return (*messages[:last], {**messages[last], "content": marked}, *messages[last + 1 :])


def _mark_content(content: object) -> list[Json] | None:
    """The content as parts, its last text part carrying the marker; None if nothing to mark."""
    if isinstance(content, str) and content:
        return [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
    if not isinstance(content, list):
        return None
    parts: list[Json] = [p for p in content if isinstance(p, Mapping)]
    texts = [i for i, p in enumerate(parts) if p.get("type") == "text" and p.get("text")]
    if not texts:
        return None
    parts[texts[-1]] = {**parts[texts[-1]], "cache_control": EPHEMERAL}
    return parts


def read_cached_tokens(usage: Json | None) -> CachedTokens:
    """Cached prompt-token counts from an OpenAI, litellm or native Anthropic usage object."""
    usage = usage if usage is not None else {}
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    read = _first_int(details.get("cached_tokens"), usage.get("cache_read_input_tokens"))
    write = _first_int(details.get("cache_write_tokens"), usage.get("cache_creation_input_tokens"))
    prompt = usage.get("prompt_tokens")
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        return CachedTokens(prompt, read, write)
    native_input = _first_int(usage.get("input_tokens"))  # Anthropic: excludes cached tokens
    return CachedTokens(native_input + read + write, read, write)


def _first_int(*values: object) -> int:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def choose_replica(
    fingerprint: str, replicas: Sequence[str], load: Mapping[str, int], *, bound: float = 1.25
) -> str:
    """The replica for a prefix: its rendezvous favourite that is under the load bound.

    The bound is `ceil(bound * (total_in_flight + 1) / len(replicas))` in-flight requests (the
    +1 is the request being placed); with `bound >= 1` some replica always fits.
    """
    if not replicas:
        raise ValueError("choose_replica needs at least one replica")
    total = sum(max(load.get(r, 0), 0) for r in replicas)
    cap = math.ceil(max(bound, 1.0) * (total + 1) / len(replicas))
    ranked = sorted(replicas, key=lambda r: _score(fingerprint, r), reverse=True)
    for replica in ranked:
        if load.get(replica, 0) + 1 <= cap:
            return replica
    return min(ranked, key=lambda r: load.get(r, 0))  # unreachable with sane loads; defensive


def _score(fingerprint: str, replica: str) -> int:
    digest = hashlib.blake2b(f"{fingerprint}\x00{replica}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
