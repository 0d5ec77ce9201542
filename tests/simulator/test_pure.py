"""Pure parts of the simulator: draws, content, request hashing, plans, prefix cache, profiles."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from router.providers.simulator import content, presets, sampling
from router.providers.simulator.hashrng import HashRandom
from router.providers.simulator.plan import build_answer, build_answers, build_plan
from router.providers.simulator.prefix_cache import PrefixCache
from router.providers.simulator.profile import ModelProfile, ProfileError, parse_profile_text
from router.providers.simulator.request import (
    Message,
    SimRequest,
    ToolSpec,
    count_tokens,
    expected_answer,
    prefix_chain,
    prompt_tokens,
)

DRAWS = 20_000


def request(*texts: str, max_tokens: int | None = None, tools: tuple[ToolSpec, ...] = (),
            stop: tuple[str, ...] = ()) -> SimRequest:
    messages = tuple(Message("system" if i == 0 and len(texts) > 1 else "user", t)
                     for i, t in enumerate(texts))
    return SimRequest("m", messages, max_tokens, stop, tools, "auto", None, False, False, "[]")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def test_lognormal_draws_reproduce_the_configured_p50_and_p99() -> None:
    """Quantile-matched lognormal draws have the configured median and 99th percentile."""
    rng = random.Random(1)
    draws = [sampling.draw_quantiles(rng, 300.0, 900.0) for _ in range(DRAWS)]
    assert quantile(draws, 0.5) == pytest.approx(300.0, rel=0.05)
    assert quantile(draws, 0.99) == pytest.approx(900.0, rel=0.1)


def test_equal_p50_and_p99_give_a_constant_and_zero_gives_zero() -> None:
    """No spread means a constant draw; a zero median means no latency at all."""
    rng = random.Random(2)
    assert {sampling.draw_quantiles(rng, 250.0, 250.0) for _ in range(10)} == {250.0}
    assert sampling.draw_quantiles(rng, 0.0, 0.0) == 0.0


def test_ttft_tail_share_sends_that_share_to_the_slow_mode() -> None:
    """With a 20% tail at 10x, about 20% of TTFT draws land in the tail, capped at its max."""
    profile = presets.steady(100, changes={"ttft_tail_share": 0.2, "ttft_tail_p50_ms": 1000,
                                           "ttft_tail_max_ms": 1500})
    rng = random.Random(3)
    draws = [sampling.draw_base_ttft_ms(profile, rng) for _ in range(DRAWS)]
    assert sum(d > 500 for d in draws) / DRAWS == pytest.approx(0.2, abs=0.02)
    assert max(draws) <= 1500


def test_ttft_grows_with_prompt_and_shrinks_on_prefix_hit() -> None:
    """Prefill adds slope x prompt tokens; a prefix hit multiplies TTFT by the factor."""
    profile = presets.steady(100, changes={"prefill_ms_per_token": 0.5,
                                           "prefix_cache_factor": 0.4})
    assert sampling.ttft_ms(100, profile, 1000, prefix_hit=False) == 600
    assert sampling.ttft_ms(100, profile, 1000, prefix_hit=True) == pytest.approx(240)


def test_outcome_rates_partition_the_draws() -> None:
    """Error and hang rates are drawn in their proportions from one uniform number."""
    profile = presets.instant({"error_rate_429": 0.1, "error_rate_500": 0.2,
                               "error_rate_503": 0.05, "hang_rate": 0.15})
    rng = random.Random(4)
    outcomes = [sampling.draw_outcome(profile, rng) for _ in range(DRAWS)]
    shares = {o: outcomes.count(o) / DRAWS for o in sampling.Outcome}
    expected = {sampling.Outcome.RATE_LIMITED: 0.1, sampling.Outcome.SERVER_ERROR: 0.2,
                sampling.Outcome.UNAVAILABLE: 0.05, sampling.Outcome.HANG: 0.15,
                sampling.Outcome.OK: 0.5}
    for outcome, share in expected.items():
        assert shares[outcome] == pytest.approx(share, abs=0.015)


def test_word_table_has_64_words_for_byte_indexing() -> None:
    """The filler vocabulary has 64 words so each random byte picks one uniformly."""
    assert len(content.WORDS) == 64 == len(set(content.WORDS))


@given(st.binary(min_size=1, max_size=32), st.integers(min_value=0, max_value=300))
def test_filler_has_the_asked_token_count_and_is_deterministic(key: bytes, count: int) -> None:
    """Filler text has exactly `count` pieces and is the same for the same key."""
    first = content.filler_pieces(HashRandom(key), count)
    assert len(first) == count
    assert first == content.filler_pieces(HashRandom(key), count)


@given(st.text(max_size=200))
def test_split_pieces_rebuilds_the_text_in_four_character_pieces(text: str) -> None:
    """Pieces join back to the text, each at most 4 characters, as many as its token count."""
    pieces = content.split_pieces(text)
    assert "".join(pieces) == text
    assert all(len(p) <= 4 for p in pieces)
    assert len(pieces) == max(1, count_tokens(text))


@given(st.text(min_size=1, max_size=20))
def test_wrong_answer_always_differs_from_the_value(value: str) -> None:
    """The deterministic wrong answer is never the expected value."""
    assert content.wrong_answer(value, HashRandom(value.encode())) != value


def test_stop_string_truncates_the_answer_before_it() -> None:
    """Output is cut just before the first occurrence of a stop string."""
    pieces = ("Ab", " cd", " ef", " gh")
    assert content.truncate_at_stop(pieces, ["ef"]) == ("Ab", " cd", " ")
    assert content.truncate_at_stop(pieces, ["zz"]) == pieces


def test_tool_arguments_fill_required_fields_with_plausible_values() -> None:
    """Arguments hold every required property with a value of its type."""
    schema = {"type": "object", "required": ["city", "count", "tags", "when", "opts"],
              "properties": {"city": {"type": "string"}, "count": {"type": "integer"},
                             "tags": {"type": "array", "items": {"type": "string"}},
                             "when": {"type": "string", "format": "date"},
                             "opts": {"type": "object", "properties": {"on": {"type": "boolean"}}},
                             "unused": {"type": "number"}}}
    arguments = json.loads(content.tool_arguments(json.dumps(schema), HashRandom(b"k")))
    assert set(arguments) == {"city", "count", "tags", "when", "opts"}
    assert arguments["city"] == "Paris" and isinstance(arguments["count"], int)
    assert arguments["when"] == "2024-05-01" and arguments["opts"] == {"on": True}


def test_prompt_tokens_count_text_overhead_and_tools() -> None:
    """Prompt tokens: ceil(chars / 4) plus 4 per message, plus the tool schemas."""
    plain = request("x" * 40)
    tooled = request("x" * 40, tools=(ToolSpec("f", "{}"),))
    assert prompt_tokens(plain) == 14
    assert prompt_tokens(tooled) == 14 + count_tokens("f") + count_tokens("{}")


def test_prefix_chain_shares_hashes_for_shared_leading_messages() -> None:
    """Two prompts with the same system message share their first prefix hash, not the last
    message (which is never part of a prefix)."""
    first = prefix_chain(request("system text", "question one"))
    second = prefix_chain(request("system text", "question two"))
    assert len(first) == 1 and first == second
    assert prefix_chain(request("only one message")) == ()


def test_expect_marker_is_read_from_the_last_user_message() -> None:
    """The marker's value comes from the last user message only."""
    assert expected_answer(request("intro <<expect:7>>", "now <<expect:42>>")) == "42"
    assert expected_answer(request("no marker here")) is None


def test_answer_respects_max_tokens_with_length_finish() -> None:
    """An answer longer than max_tokens is cut to it and finishes with `length`."""
    profile = presets.instant({"output_tokens_p50": 50, "output_tokens_p99": 50})
    answer = build_answer(request("hi", max_tokens=7), profile)
    assert len(answer.pieces) == 7 and answer.finish_reason == "length"


def test_plan_timetable_spaces_chunks_by_tokens_per_chunk() -> None:
    """Chunk i is due at ttft + i x k x tpot; the whole answer at ttft + (n - 1) x tpot."""
    profile = presets.steady(100, tpot_ms=10, output_tokens=9, changes={"tokens_per_chunk": 3})
    plan = build_plan((build_answer(request("hi"), profile),), profile, random.Random(0), 5, 0)
    assert len(plan.chunks()) == 3
    assert [round(plan.chunk_time_s(i), 6) for i in range(3)] == [0.1, 0.13, 0.16]
    assert plan.total_s == pytest.approx(0.18)


def test_n_choices_decode_side_by_side_until_each_ends() -> None:
    """Each decoding step streams a chunk of every choice still going; the whole answer waits
    for the longest choice; usage counts every choice's tokens; choice 0 is a single answer's
    draw, the others draws of their own."""
    profile = presets.steady(100, tpot_ms=10, output_tokens=9)
    profile = profile.model_copy(update={"output_tokens_p50": 5, "output_tokens_p99": 40})
    asked = dataclasses.replace(request("hi"), choices=4)
    answers = build_answers(asked, profile)
    assert answers[0] == build_answer(asked, profile)
    assert len({a.pieces for a in answers}) == 4
    plan = build_plan(answers, profile, random.Random(0), 5, 0)
    lengths = [len(a.pieces) for a in answers]
    steps = plan.steps()
    assert len(steps) == max(lengths)
    assert [sum(1 for s in steps for c, _ in s if c == choice) for choice in range(4)] == lengths
    assert all([c for c, _ in step] == sorted(c for c, _ in step) for step in steps)
    assert ["".join(t for s in steps for c, t in s if c == choice) for choice in range(4)] == [
        "".join(a.pieces) for a in answers]
    assert plan.completion_tokens == sum(lengths)
    assert plan.total_s == pytest.approx(0.1 + (max(lengths) - 1) * 0.01)


def test_expect_marker_accuracy_is_drawn_per_choice() -> None:
    """Each of `n` choices is right with the profile's accuracy, on its own draw."""
    profile = presets.instant({"accuracy": 0.5})
    right = [a.pieces == content.split_pieces("42")
             for i in range(60)
             for a in build_answers(dataclasses.replace(request(f"q{i} <<expect:42>>"),
                                                        choices=3), profile)]
    assert 0.3 < sum(right) / len(right) < 0.7
    by_request = [right[i:i + 3] for i in range(0, len(right), 3)]
    assert any(len(set(r)) > 1 for r in by_request)  # choices of one request disagree


def test_prefix_cache_hits_longest_live_prefix_and_expires_after_ttl() -> None:
    """A recorded prefix is a hit until its TTL passes."""
    clock = FakeClock()
    cache = PrefixCache(clock)
    chain = prefix_chain(request("system", "user one", "assistant", "user two"))
    assert cache.lookup_and_record(chain[:1], ttl_s=10, capacity=100, min_tokens=0) == 0
    assert cache.lookup_and_record(chain, 10, 100, 0) == chain[0][1]
    assert cache.lookup_and_record(chain, 10, 100, 0) == chain[-1][1]
    clock.now = 11
    assert cache.lookup_and_record(chain, 10, 100, 0) == 0


def test_prefix_cache_evicts_least_recent_and_ignores_short_prefixes() -> None:
    """Beyond capacity the oldest prefix is forgotten; prefixes under min_tokens never hit."""
    cache = PrefixCache(FakeClock())
    a, b = prefix_chain(request("a" * 100, "q")), prefix_chain(request("b" * 100, "q"))
    cache.lookup_and_record(a, 10, 1, 0)
    cache.lookup_and_record(b, 10, 1, 0)
    assert cache.lookup_and_record(a, 10, 1, 0) == 0
    assert cache.lookup_and_record(a, 10, 1, min_tokens=10_000) == 0


def test_profile_rejects_unknown_fields_and_inconsistent_quantiles() -> None:
    """Profiles are strict: unknown fields, p99 < p50 and rates over 1 are errors."""
    with pytest.raises(ValidationError):
        ModelProfile.model_validate({"ttft_ms": 1})
    with pytest.raises(ValidationError):
        ModelProfile(ttft_p50_ms=500, ttft_p99_ms=100)
    with pytest.raises(ValidationError):
        ModelProfile(error_rate_429=0.6, hang_rate=0.6)


def test_profile_file_parses_yaml_and_checks_the_default_model() -> None:
    """YAML profile files load; a default model that is not defined is an error."""
    loaded = parse_profile_text("models:\n  a: {ttft_p50_ms: 5, ttft_p99_ms: 9}\n", ".yaml")
    assert loaded.models["a"].ttft_p99_ms == 9
    with pytest.raises(ProfileError):
        parse_profile_text('{"models": {}, "default_model": "x"}', ".json")


def test_builtin_profiles_note_a_source_for_every_latency_number() -> None:
    """Every built-in demo model says where its TTFT, TPOT and output lengths come from."""
    for name in presets.builtin_names():
        sources = presets.builtin(name).sources
        assert {"ttft", "tpot", "output_tokens", "prefill_ms_per_token"} <= set(sources)


def test_builtin_demo_models_differ_in_speed_and_price() -> None:
    """The demo set spans speeds and prices (sim-fast is cheaper and faster than sim-large)."""
    small, large = presets.builtin("sim-fast"), presets.builtin("sim-large")
    assert small.ttft_p50_ms < large.ttft_p50_ms and small.tpot_p50_ms < large.tpot_p50_ms
    assert (small.price_output_per_mtok or math.inf) < (large.price_output_per_mtok or 0)


DATA = Path("/work/shared/data/latency")


@pytest.mark.skipif(not DATA.exists(), reason="the measured latency data is not on this machine")
def test_committed_profiles_are_what_the_fitting_script_produces() -> None:
    """default_profiles.json is regenerated exactly by fit_profiles from the measured data."""
    from router.providers.simulator.fit_profiles import fit
    from router.providers.simulator.profile import dump_profile_file, load_profile_file

    assert dump_profile_file(fit(DATA)) == dump_profile_file(load_profile_file())


def test_output_lengths_over_many_requests_follow_the_profile() -> None:
    """Deterministic per request, yet across requests the lengths have the configured median."""
    profile = presets.instant({"output_tokens_p50": 129, "output_tokens_p99": 601,
                               "output_tokens_max": 1000})
    lengths = [float(len(build_answer(request(f"q{i}"), profile).pieces)) for i in range(3000)]
    assert quantile(lengths, 0.5) == pytest.approx(129, rel=0.1)
    assert quantile(lengths, 0.99) == pytest.approx(601, rel=0.2)
    assert max(lengths) <= 1000
