"""Prompt-prefix reuse: mark stable prefixes for provider caches, and keep prefixes on replicas.

(a) Providers with prompt caching get the stable prefix (system prompt, tools) marked the way
each expects: Anthropic `cache_control` breakpoints, OpenAI `prompt_cache_key` scoped per
tenant. (b) Among replicas of one model (e.g. several vLLM servers), requests sharing a prefix
go to the same replica (rendezvous hashing with bounded load) so its KV cache is reused.
Pure functions; the marking itself lives in `cache.prefix`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cache.prefix import choose_replica, mark_prefix, prefix_fingerprint

# Below this many characters of stable prefix nothing is marked (providers' minimums are
# about 1,024 tokens; marking short prefixes only costs cache writes).
MIN_PREFIX_CHARS = 4096


def marked_bodies(body: Mapping[str, Any], tenant: str,
                  kinds: Collection[str] = ("anthropic", "openai"),
                  min_chars: int = MIN_PREFIX_CHARS) -> dict[str, dict[str, Any]]:
    """The upstream body per prompt-cache kind among `kinds` (those of the deployments that may
    serve it), when its prefix is worth caching."""
    messages = body.get("messages")
    tools = body.get("tools")
    if not isinstance(messages, list):
        return {}
    bodies: dict[str, dict[str, Any]] = {}
    for kind in ("anthropic", "openai"):
        if kind not in kinds:
            continue
        marked = mark_prefix(messages, tools if isinstance(tools, list) else None, kind,
                             tenant=tenant, min_prefix_chars=min_chars)
        if marked.prompt_cache_key is None and list(marked.messages) == messages:
            continue
        changed = {**body, "messages": list(marked.messages)}
        if marked.tools is not None:
            changed["tools"] = list(marked.tools)
        if marked.prompt_cache_key is not None:
            changed.setdefault("prompt_cache_key", marked.prompt_cache_key)
        bodies[kind] = changed
    return bodies


def affinity_order(deployments: Sequence[str], replicas: Sequence[str],
                   body: Mapping[str, Any], load: Mapping[str, int],
                   bound: float = 1.25) -> tuple[str, ...]:
    """Put the prefix's favourite replica (under its load bound) first among `replicas`."""
    candidates = [d for d in deployments if d in replicas]
    messages = body.get("messages")
    if len(candidates) < 2 or not isinstance(messages, list) or not messages:
        return tuple(deployments)
    tools = body.get("tools")
    fingerprint = prefix_fingerprint(messages, tools if isinstance(tools, list) else None)
    chosen = choose_replica(fingerprint, candidates, load, bound=bound)
    first = list(deployments).index(candidates[0])
    rest = [d for d in deployments if d != chosen]
    return (*rest[:first], chosen, *rest[first:])
