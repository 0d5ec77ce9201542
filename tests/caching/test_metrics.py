"""The cache's metrics at the service's `/metrics`, on both backends.

Issue 6 asks for hit rate, bypass reasons, time saved and stale hits. Lookups by status are
exported; the test reads the Prometheus text without assuming metric names beyond the word
`cache`, and checks that each quantity is visible with a non-zero value after traffic that
must produce it.
"""

from __future__ import annotations

import httpx

from tests.caching.conftest import Gateway
from tests.caching.service import Caller, unique_messages


def cache_samples(base_url: str) -> list[tuple[str, float]]:
    """(name with labels, value) of every `/metrics` sample whose name mentions the cache."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    samples = []
    for line in text.splitlines():
        if line.startswith("#") or "cache" not in line.split("{")[0].split(" ")[0]:
            continue
        name, _, value = line.rpartition(" ")
        samples.append((name, float(value)))
    return samples


def produce_traffic(caller: Caller) -> None:
    messages = unique_messages("metrics")
    caller.chat(messages)
    caller.chat(messages)
    caller.chat(unique_messages("metrics-nondet"), temperature=0.5)


def test_lookups_by_status_are_exported(gateway: Gateway, caller: Caller) -> None:
    """`/metrics` counts cache lookups by hit, miss and bypass."""
    produce_traffic(caller)
    samples = cache_samples(gateway.base_url)
    for status in ("hit", "miss", "bypass"):
        assert any(f'"{status}"' in name and value > 0 for name, value in samples), status


def test_bypass_reasons_and_time_saved_are_exported(gateway: Gateway, caller: Caller) -> None:
    """`/metrics` shows bypasses by reason (here `nondeterministic`) and the time hits saved."""
    produce_traffic(caller)
    samples = cache_samples(gateway.base_url)
    assert any("nondeterministic" in name and value > 0 for name, value in samples)
    assert any("saved" in name and value > 0 for name, value in samples)


def _sample(samples: list[tuple[str, float]], name: str, label: str = "") -> float:
    return sum(value for sample, value in samples
               if sample.split("{")[0] == name and label in sample)


def test_provider_prompt_cache_use_is_exported(gateway: Gateway, caller: Caller) -> None:
    """`/metrics` shows how often providers read prompt tokens from their prompt caches, and how
    many: two answers from upstream (nondeterministic, so the result cache is bypassed) share a
    system prompt, and the second reads it from the simulator's prefix cache."""
    before = cache_samples(gateway.base_url)
    first, second = unique_messages("prompt-cache"), unique_messages("prompt-cache")
    for messages in (first, [first[0], second[1]]):
        assert caller.chat(messages, temperature=0.5).status == 200
    after = cache_samples(gateway.base_url)
    answers = "slorouter_prompt_cache_answers"
    grew = {label: _sample(after, answers, label) - _sample(before, answers, label)
            for label in ('cached="yes"', 'cached="no"')}
    assert sum(grew.values()) == 2 and grew['cached="yes"'] >= 1, grew
    tokens = "slorouter_prompt_cache_cached_tokens"
    assert _sample(after, tokens) > _sample(before, tokens)
