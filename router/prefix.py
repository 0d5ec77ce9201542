"""Prompt-prefix reuse: mark stable prefixes for provider caches, and keep prefixes on replicas.

(a) Providers with prompt caching get the stable prefix (system prompt, tools) marked the way
each expects: Anthropic `cache_control` breakpoints, OpenAI `prompt_cache_key` scoped per
tenant; self-hosted OpenAI-compatible servers (vLLM, ...) get a per-tenant `cache_salt`, so their
automatic prefix cache is reused only within a tenant. (b) Among replicas of one model (e.g.
several vLLM servers), one tenant's requests sharing a prefix go to the same replica (rendezvous
hashing with bounded load) so its KV cache is reused; two tenants' identical prefixes are placed
independently. Pure functions; the marking itself lives in `cache.prefix`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cache.prefix import (
    cache_salt,
    choose_replica,
    mark_prefix,
    prefix_fingerprint,
    prompt_cache_key,
)

# Below this many characters of stable prefix nothing is marked (providers' minimums are
# about 1,024 tokens; marking short prefixes only costs cache writes).
MIN_PREFIX_CHARS = 4096


def marked_bodies(body: Mapping[str, Any], tenant: str,
                  kinds: Collection[str] = ("anthropic", "openai"),
                  min_chars: int = MIN_PREFIX_CHARS,
                  chosen_salt: object = None) -> dict[str, dict[str, Any]]:
    """The upstream body per body kind among `kinds` (those of the deployments that may serve
    it, `Deployment.body_kind`): Anthropic's and OpenAI's when the prefix is worth caching, and
    `salted` (a self-hosted server's: the tenant's `cache_salt`, or `chosen_salt`, the client's
    own, which `upstream_body` has scoped) whatever the prefix, since such a server caches any.
    `body` holds no `cache_salt`: no other server takes one (OpenAI refuses an unknown field,
    Anthropic a nested `extra_body`, so a client's salt sent to `auto` failed on them; a
    self-hosted server with `tenant_cache_salt: false` is one that takes none, or whose cache
    needs no partition)."""
    bodies: dict[str, dict[str, Any]] = {}
    if "salted" in kinds:
        salt = chosen_salt if isinstance(chosen_salt, str) else cache_salt(tenant)
        bodies["salted"] = {**body, "cache_salt": salt}
    messages = body.get("messages")
    tools = body.get("tools")
    if not isinstance(messages, list):
        return bodies
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
                   body: Mapping[str, Any], tenant: str, load: Mapping[str, int],
                   bound: float = 1.25) -> tuple[str, ...]:
    """Put the tenant's prefix's favourite replica (under its load bound) first among
    `replicas`. The tenant is part of the placement key: one tenant's prefix keeps its replica,
    and another tenant's identical prefix is placed independently of it."""
    candidates = [d for d in deployments if d in replicas]
    messages = body.get("messages")
    if len(candidates) < 2 or not isinstance(messages, list) or not messages:
        return tuple(deployments)
    tools = body.get("tools")
    fingerprint = prefix_fingerprint(messages, tools if isinstance(tools, list) else None)
    chosen = choose_replica(prompt_cache_key(tenant, fingerprint), candidates, load, bound=bound)
    first = list(deployments).index(candidates[0])
    rest = [d for d in deployments if d != chosen]
    return (*rest[:first], chosen, *rest[first:])
