"""Reading an upstream's `usage` and chunks: whatever it sends, the router reads what it can and
never fails on it (a malformed answer was a 500 `internal_error` before; found by
`tests/integration/test_upstream_fuzz.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from router.providers.base import MAX_TOKEN_COUNT, Deployment, Usage, chunk_event


def test_openai_and_anthropic_style_usage_are_read() -> None:
    assert Usage.from_openai({"prompt_tokens": 12, "completion_tokens": 3,
                              "prompt_tokens_details": {"cached_tokens": 8}}) == Usage(12, 3, 8)
    assert Usage.from_openai({"prompt_tokens": 12, "completion_tokens": 3,
                              "cache_read_input_tokens": 5}) == Usage(12, 3, 5)
    assert Usage.from_openai({"prompt_tokens": 12.0, "completion_tokens": 3}) == Usage(12, 3, 0)


@pytest.mark.parametrize("raw", [None, {}, [None], [], "12", 12, True])
def test_usage_that_is_not_an_object_is_no_usage(raw: object) -> None:
    assert Usage.from_openai(raw) is None


@pytest.mark.parametrize("count", ["12", -1, True, 2.5, None, [3], {"n": 3}, MAX_TOKEN_COUNT + 1,
                                   2**70])
def test_a_count_that_is_not_a_token_count_reads_as_zero(count: object) -> None:
    usage = Usage.from_openai({"prompt_tokens": count, "completion_tokens": 4,
                               "prompt_tokens_details": {"cached_tokens": count}})
    assert usage == Usage(0, 4, 0)


@pytest.mark.parametrize("raw", [
    {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},  # litellm's, made up
    {"prompt_tokens": "12", "completion_tokens": "3"},  # nothing readable
    {"total_tokens": 15},
])
def test_a_usage_of_no_tokens_in_or_out_is_no_report(raw: object) -> None:
    """litellm makes up a usage of 0 tokens for an upstream that sent none; read as the
    provider's, the answer was recorded as free (the cost audit of 2026-12-07). Such a usage is
    none, and the answer is priced from the router's estimates; a usage chunk stays one."""
    assert Usage.from_openai(raw) is None
    event = chunk_event(b"{}", {"choices": [], "usage": raw})
    assert event.usage_only and event.usage is None


@pytest.mark.parametrize("details", [[1], "x", 7])
def test_prompt_details_that_are_not_an_object_are_ignored(details: object) -> None:
    usage = Usage.from_openai({"prompt_tokens": 9, "completion_tokens": 1,
                               "prompt_tokens_details": details, "cache_read_input_tokens": 2})
    assert usage == Usage(9, 1, 2)


@pytest.mark.parametrize(("chunk", "has_content"), [
    ({"choices": [{"delta": {"content": "hi"}}]}, True),
    ({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}, True),
    ({"choices": {"0": {"delta": {"content": "hi"}}}}, False),
    ({"choices": ["hi", None, 3]}, False),
    ({"choices": [{"delta": "hi"}]}, False),
    ({"choices": [{"delta": None}]}, False),
    ({"choices": None}, False),
])
def test_chunks_of_any_shape_are_classified_without_failing(chunk: dict[str, Any],
                                                           has_content: bool) -> None:
    assert chunk_event(b"{}", chunk).has_content is has_content


def test_a_usage_chunk_is_usage_only_and_a_malformed_one_is_not_usage() -> None:
    good = chunk_event(b"{}", {"choices": [], "usage": {"prompt_tokens": 2,
                                                        "completion_tokens": 1}})
    assert good.usage_only and good.usage == Usage(2, 1, 0)
    odd = chunk_event(b"{}", {"choices": [], "usage": [2, 1]})
    assert not odd.usage_only and odd.usage is None


def test_prompt_cache_writes_are_read_in_either_format() -> None:
    """litellm passes Anthropic's cache creation as `cache_creation_input_tokens`; OpenAI's
    format has `prompt_tokens_details.cache_write_tokens`."""
    anthropic = Usage.from_openai({"prompt_tokens": 5050, "completion_tokens": 100,
                                   "cache_creation_input_tokens": 5000})
    openai_style = Usage.from_openai({"prompt_tokens": 5050, "completion_tokens": 100,
                                      "prompt_tokens_details": {"cached_tokens": 0,
                                                                "cache_write_tokens": 5000}})
    assert anthropic == openai_style == Usage(5050, 100, 0, 5000)


def test_prompt_cache_writes_are_billed_at_the_write_price() -> None:
    """Anthropic bills cache writes at 1.25 times the input price: 50 plain input tokens,
    5,000 written, 100 output at $1/$1.25/$5 per million are $0.0068, not $0.00555."""
    deployment = Deployment(name="h", model="anthropic/claude-haiku-4-5", adapter="litellm",
                            api_base=None, api_key=None, input_price_per_mtok=1.0,
                            output_price_per_mtok=5.0, context_window=None,
                            cached_input_price_per_mtok=0.1, cache_write_price_per_mtok=1.25)
    assert deployment.cost_usd(5050, 100, 0, 5000) == pytest.approx(0.0068)
    assert deployment.cost_usd(5050, 100, 3000, 5000) == pytest.approx(  # writes clamped
        (3000 * 0.1 + 2050 * 1.25 + 100 * 5.0) / 1e6)


def test_one_hour_prompt_cache_writes_are_read_and_billed_at_their_price() -> None:
    """Anthropic bills a 1-hour write (`ttl: "1h"`) at twice the input price: read as litellm
    passes it (`cache_creation_token_details`) or as Anthropic sends it (`cache_creation`),
    and priced at the 1-hour price; a deployment without one bills the write price. The
    router billed every write at the 5-minute price ($0.375 for $0.60: the prompt-cache audit
    of 2026-12-07, from litellm's table for Sonnet 4.5)."""
    by_litellm = Usage.from_openai({
        "prompt_tokens": 100_015, "completion_tokens": 3,
        "cache_creation_input_tokens": 100_000,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_token_details": {
            "ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 100_000}}})
    by_anthropic = Usage.from_openai({
        "prompt_tokens": 100_015, "completion_tokens": 3,
        "cache_creation_input_tokens": 100_000,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 100_000}})
    assert by_litellm == by_anthropic == Usage(100_015, 3, 0, 100_000, 100_000)
    assert by_litellm is not None
    sonnet = Deployment(name="s", model="anthropic/claude-sonnet-4-5", adapter="litellm",
                        api_base=None, api_key=None, input_price_per_mtok=3.0,
                        output_price_per_mtok=15.0, context_window=None,
                        cache_write_price_per_mtok=3.75, cache_write_1h_price_per_mtok=6.0)
    assert sonnet.usage_cost_usd(by_litellm) == pytest.approx(
        (15 * 3.0 + 100_000 * 6.0 + 3 * 15.0) / 1e6)  # 0.60009
    mixed = Usage(100_015, 3, 0, 100_000, 40_000)
    assert sonnet.usage_cost_usd(mixed) == pytest.approx(
        (15 * 3.0 + 60_000 * 3.75 + 40_000 * 6.0 + 3 * 15.0) / 1e6)
    unlisted = Deployment(name="u", model="anthropic/claude-x", adapter="litellm",
                          api_base=None, api_key=None, input_price_per_mtok=3.0,
                          output_price_per_mtok=15.0, context_window=None,
                          cache_write_price_per_mtok=3.75)
    assert unlisted.usage_cost_usd(by_litellm) == pytest.approx(
        (15 * 3.0 + 100_000 * 3.75 + 3 * 15.0) / 1e6)


def test_the_one_hour_write_price_comes_from_litellm_s_table() -> None:
    from router.providers.price_table import PriceTable

    table = PriceTable.bundled()
    listed = table.cache_write_1h_price("anthropic/claude-sonnet-4-5")
    assert listed is not None and listed > (table.cache_write_price(
        "anthropic/claude-sonnet-4-5") or 0)
