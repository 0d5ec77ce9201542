"""Key derivation: the field partition, canonical form, and what the scope separates."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import get_args

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import completion_create_params

from cache.keys import (
    KEY_FIELDS,
    NON_KEY_FIELDS,
    UnknownFieldError,
    canonical_request,
    derive_key,
    unknown_fields,
)
from tests.cache.helpers import request, scope


def _openai_request_fields() -> frozenset[str]:
    fields: set[str] = set()
    for variant in get_args(completion_create_params.CompletionCreateParams):
        fields.update(variant.__annotations__)
    return frozenset(fields)


def test_every_openai_request_field_is_classified_in_or_out_of_the_key() -> None:
    """A field the installed openai SDK knows but the partition does not fails this test."""
    sdk_fields = _openai_request_fields()
    assert sdk_fields, "could not read the SDK's request fields"
    assert sdk_fields - KEY_FIELDS - NON_KEY_FIELDS == set()


def test_key_and_non_key_fields_are_disjoint_and_known_to_the_sdk() -> None:
    """No field is both in and out of the key, and the partition names no invented field."""
    assert not KEY_FIELDS & NON_KEY_FIELDS
    assert (KEY_FIELDS | NON_KEY_FIELDS) - _openai_request_fields() == set()


def test_unknown_field_is_reported_and_refused_by_derive_key() -> None:
    """A field in neither set is never silently dropped from the key."""
    fields = request(frobnicate=True)
    assert unknown_fields(fields) == {"frobnicate"}
    with pytest.raises(UnknownFieldError):
        derive_key(scope(), fields)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def _shuffled(value: object, rng: random.Random) -> object:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=200, deadline=None)
@given(extra=json_values, seed=st.integers(0, 2**32), indent=st.sampled_from([None, 1, 4]))
def test_key_ignores_json_key_order_and_whitespace(
    extra: object, seed: int, indent: int | None
) -> None:
    """Re-serializing a request with shuffled keys and other whitespace keeps its key."""
    fields = request(response_format={"type": "json_schema", "json_schema": {"schema": extra}})
    rng = random.Random(seed)
    text = json.dumps(_shuffled(fields, rng), indent=indent, separators=(", ", " : "))
    assert derive_key(scope(), orjson.loads(text)) == derive_key(scope(), fields)


def test_key_treats_top_level_null_as_absent_and_integral_floats_as_ints() -> None:
    """`"seed": null` is the default, and temperature 0.0 is temperature 0."""
    base = derive_key(scope(), request())
    assert derive_key(scope(), request(seed=None)) == base
    assert derive_key(scope(), request(temperature=0.0)) == base


def test_key_ignores_transport_and_bookkeeping_fields() -> None:
    """stream, stream_options, user, metadata and service_tier do not change the key."""
    fields = request(
        stream=True,
        stream_options={"include_usage": True},
        user="u-1",
        metadata={"trace": "x"},
        service_tier="flex",
    )
    assert derive_key(scope(), fields) == derive_key(scope(), request())


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.2},
        {"seed": 7},
        {"stop": ["\n"]},
        {"max_tokens": 5},
        {"max_completion_tokens": 5},
        {"n": 2},
        {"top_p": 0.5},
        {"logprobs": True},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
        {"reasoning_effort": "low"},
        {"messages": [{"role": "user", "content": "Capital of France? "}]},
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}
            ]
        },
    ],
)
def test_key_changes_with_every_output_affecting_field(change: dict[str, object]) -> None:
    """Each output-affecting field (whitespace inside text included) moves the key."""
    assert derive_key(scope(), request(**change)) != derive_key(scope(), request())


@pytest.mark.parametrize(
    "change",
    [
        {"tenant": "globex"},
        {"scopes": frozenset({"docs:read", "docs:admin"})},
        {"scopes": frozenset()},
        {"locale": "fr-FR"},
        {"policy_version": "pv2"},
        {"models": frozenset({"gpt-4o-mini", "claude-haiku"})},
        {"data_version": "dv2"},
        {"data_version": None},
    ],
)
def test_key_changes_with_every_part_of_the_scope(change: dict[str, object]) -> None:
    """Tenant, scopes, locale, policy version, model set and data version all separate keys."""
    base = scope()
    moved = replace(base, **change)  # type: ignore[arg-type]
    assert derive_key(moved, request()) != derive_key(base, request())


def test_key_ignores_scope_order_and_locale_spelling() -> None:
    """Scopes are a set, and en_us names the same locale as en-US."""
    a = scope(scopes=frozenset(["b", "a"]), locale="en_us")
    b = scope(scopes=frozenset(["a", "b"]), locale="EN-US")
    assert derive_key(a, request()) == derive_key(b, request())


def test_key_does_not_contain_scopes_or_tenant_in_clear() -> None:
    """The key is safe to log: tenant and scopes appear only hashed."""
    key = derive_key(scope(tenant="acme-secret", scopes=frozenset({"hr:salaries"})), request())
    assert "acme-secret" not in key
    assert "salaries" not in key


def test_a_huge_whole_float_keys_like_any_float() -> None:
    """`1e20` is a whole number beyond 64 bits: kept a float (orjson refuses such an int), so a
    deterministic request carrying it gets a key, not a 500."""
    small = canonical_request({"temperature": 0, "logit_bias": {"50256": 1.0}})
    huge = canonical_request({"temperature": 0, "logit_bias": {"50256": 1e20}})
    maximal = canonical_request({"temperature": 0, "logit_bias": 1e308})
    assert small == canonical_request({"temperature": 0.0, "logit_bias": {"50256": 1}})
    assert len({small, huge, maximal}) == 3
