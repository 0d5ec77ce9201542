"""Cacheability decisions: determinism, policy rule, risk, side effects, Cache-Control."""

from __future__ import annotations

import pytest

from cache.policy import (
    CacheControl,
    CacheRule,
    decide,
    is_deterministic,
    parse_cache_control,
)
from tests.cache.helpers import request

RULE = CacheRule(enabled=True, ttl_s=120.0)


def test_deterministic_request_reads_and_writes_with_the_rule_ttl() -> None:
    """temperature 0 under an enabled rule: read and write, TTL from the rule."""
    decision = decide(request(), RULE, task="chat", risk="low")
    assert (decision.read, decision.write, decision.bypass_reason) == (True, True, None)
    assert decision.ttl_s == RULE.ttl_s


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0}, True),
        ({"temperature": 0.7, "seed": 1}, True),
        ({"seed": 0}, True),
        ({"temperature": 0.7}, False),
        ({}, False),
        ({"temperature": False}, False),
    ],
)
def test_deterministic_means_temperature_zero_or_a_seed(
    fields: dict[str, object], expected: bool
) -> None:
    """A seed (even 0) or temperature 0 is deterministic enough; the default sampling is not."""
    assert is_deterministic(fields) is expected


@pytest.mark.parametrize(
    ("kwargs", "fields", "reason"),
    [
        ({"risk": "high"}, request(), "high_risk"),
        ({"signals": frozenset({"side_effects"})}, request(), "side_effects"),
        ({"task": "action"}, request(), "side_effects"),
        ({}, request(temperature=0.9), "nondeterministic"),
        ({}, request(frobnicate=1), "unknown_field"),
        ({}, request(web_search_options={}), "live_data"),
        ({}, request(modalities=["text", "audio"]), "audio_output"),
    ],
)
def test_requests_that_must_never_be_cached_neither_read_nor_write(
    kwargs: dict[str, object], fields: dict[str, object], reason: str
) -> None:
    """High risk, side effects, sampling, unknown fields and live data bypass both ways."""
    args: dict[str, object] = {"task": "chat", "risk": "low", **kwargs}
    decision = decide(fields, RULE, **args)  # type: ignore[arg-type]
    assert (decision.read, decision.write, decision.bypass_reason) == (False, False, reason)
    assert not decision.uses_cache


def test_disabled_rule_bypasses_even_deterministic_requests() -> None:
    """A policy that disables the cache wins over determinism."""
    decision = decide(request(), CacheRule(enabled=False), task="chat", risk="low")
    assert decision.bypass_reason == "disabled"


def test_rule_may_waive_determinism() -> None:
    """require_deterministic=False caches sampled answers too."""
    rule = CacheRule(require_deterministic=False)
    decision = decide(request(temperature=1.0), rule, task="chat", risk="medium")
    assert decision.read and decision.write


def test_no_cache_skips_the_read_but_still_writes_the_fresh_answer() -> None:
    """Cache-Control: no-cache → bypass the lookup, refresh the entry."""
    control = parse_cache_control("no-cache")
    decision = decide(request(), RULE, task="chat", risk="low", control=control)
    assert (decision.read, decision.write, decision.bypass_reason) == (False, True, "no_cache")


def test_no_store_reads_but_never_writes() -> None:
    """Cache-Control: no-store → a hit may be served, nothing is written."""
    control = parse_cache_control("no-store")
    decision = decide(request(), RULE, task="chat", risk="low", control=control)
    assert (decision.read, decision.write, decision.bypass_reason) == (True, False, "no_store")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, CacheControl()),
        ("", CacheControl()),
        ("No-Cache", CacheControl(no_cache=True)),
        ("max-age=0, no-store", CacheControl(no_store=True, max_age_s=0)),
        ("no-store,no-cache", CacheControl(no_cache=True, no_store=True)),
        ("private, Max-Age=60", CacheControl(max_age_s=60)),
        ("max-age=-1", CacheControl()),
        ("max-age", CacheControl()),
    ],
)
def test_cache_control_header_is_parsed_case_insensitively(
    header: str | None, expected: CacheControl
) -> None:
    """Directives are matched case-insensitively; `max-age` takes whole seconds (anything else
    is ignored, as are other directives)."""
    assert parse_cache_control(header) == expected
