"""What the service never caches, on both backends: errors, cut streams, non-deterministic,
high-risk and side-effecting requests, and tasks whose policy turns the cache off.

"Not cached" is shown where it matters: the same request later reaches the upstream again
(the simulator's counters), and the router labels the request `bypass` or `miss`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.caching.service import Caller, SimStats, unique_messages


@pytest.fixture
def flaky(sim_stats: SimStats) -> Iterator[SimStats]:
    """The `flaky` model answering 500 until the test turns it off (and off again after)."""
    sim_stats.set_profile("flaky", error_rate_500=1.0)
    yield sim_stats
    sim_stats.set_profile("flaky", error_rate_500=0.0)


@pytest.fixture
def cutter(sim_stats: SimStats) -> Iterator[SimStats]:
    """The `cutter` model cutting every stream after 3 chunks until the test turns it off."""
    sim_stats.set_profile("cutter", cut_rate=1.0, cut_after_chunks=3)
    yield sim_stats
    sim_stats.set_profile("cutter", cut_rate=0.0)


def test_error_answer_is_never_cached(caller: Caller, flaky: SimStats) -> None:
    """After an upstream 500, the same request goes upstream again and its answer is cached."""
    messages = unique_messages("error")
    failed = caller.chat(messages, model="flaky")
    assert failed.status >= 500 and failed.body is None
    flaky.set_profile("flaky", error_rate_500=0.0)
    before = flaky.requests("flaky")
    recovered = caller.chat(messages, model="flaky")
    assert (recovered.status, recovered.cache) == (200, "miss")
    assert flaky.requests("flaky") - before == 1
    assert caller.chat(messages, model="flaky").cache == "hit"


@pytest.mark.parametrize("mode", ["abort", "eof"])
def test_cut_stream_is_never_cached(caller: Caller, cutter: SimStats, mode: str) -> None:
    """A stream cut upstream (dropped connection or early EOF) leaves no entry behind."""
    cutter.set_profile("cutter", cut_mode=mode)
    messages = unique_messages(f"cut-{mode}")
    cut = caller.chat(messages, model="cutter", stream=True)
    assert cut.finish_reason is None
    cutter.set_profile("cutter", cut_rate=0.0)
    before = cutter.requests("cutter")
    whole = caller.chat(messages, model="cutter", stream=True)
    as_json = caller.chat(messages, model="cutter")
    assert (whole.cache, whole.error) == ("miss", None)
    assert whole.finish_reason in ("stop", "length")
    assert cutter.requests("cutter") - before == 1
    assert as_json.cache == "hit" and as_json.content == whole.content
    assert cut.content is not None and whole.content is not None
    assert whole.content.startswith(cut.content)


NONDETERMINISTIC: dict[str, dict[str, Any]] = {
    "no_temperature": {"temperature": openai.NOT_GIVEN},
    "temperature_0.7": {"temperature": 0.7},
    "temperature_1_top_p_0.5": {"temperature": 1, "top_p": 0.5},
}


@pytest.mark.parametrize("params", NONDETERMINISTIC.values(), ids=NONDETERMINISTIC.keys())
def test_nondeterministic_request_bypasses_the_cache(caller: Caller, sim_stats: SimStats,
                                                      params: dict[str, Any]) -> None:
    """Without temperature 0 or a seed, every repeat goes upstream and is labelled bypass."""
    messages = unique_messages("nondet")
    before = sim_stats.requests()
    seen = [caller.chat(messages, **params) for _ in range(2)]
    assert [s.cache for s in seen] == ["bypass", "bypass"]
    assert [s.status for s in seen] == [200, 200]
    assert sim_stats.requests() - before == 2


def test_seeded_request_at_temperature_one_is_cached(caller: Caller, sim_stats: SimStats) -> None:
    """A seed makes a request deterministic enough: the repeat is a hit."""
    messages = unique_messages("seed")
    before = sim_stats.requests()
    seen = [caller.chat(messages, temperature=1, seed=7) for _ in range(2)]
    assert [s.cache for s in seen] == ["miss", "hit"]
    assert sim_stats.requests() - before == 1
    other_seed = caller.chat(messages, temperature=1, seed=8)
    assert other_seed.cache == "miss"


BYPASSED_LABELS = {
    "high_risk": {"x-slorouter-task": "chat", "x-slorouter-risk": "high"},
    "action_task": {"x-slorouter-task": "action", "x-slorouter-risk": "low"},
    "policy_disabled": {"x-slorouter-task": "translation", "x-slorouter-risk": "low"},
    "risk_rule_off": {"x-slorouter-task": "summarization", "x-slorouter-risk": "medium"},
}


@pytest.mark.parametrize("hints", BYPASSED_LABELS.values(), ids=BYPASSED_LABELS.keys())
def test_high_risk_action_and_policy_disabled_requests_bypass(
        caller: Caller, sim_stats: SimStats, hints: dict[str, str]) -> None:
    """High risk, the action task, a policy's `cache.enabled: false` and a risk rule's
    `cache: false` never read or write, even at temperature 0."""
    messages = unique_messages("labels")
    before = sim_stats.requests()
    seen = [caller.chat(messages, model="auto", headers=hints) for _ in range(2)]
    assert [s.cache for s in seen] == ["bypass", "bypass"]
    assert [s.status for s in seen] == [200, 200]
    assert sim_stats.requests() - before == 2


def test_same_task_at_a_risk_the_rule_allows_is_cached(caller: Caller) -> None:
    """The control for the risk rule: `summarization` at low risk hits on repeat."""
    messages = unique_messages("labels-control")
    hints = {"x-slorouter-task": "summarization", "x-slorouter-risk": "low"}
    seen = [caller.chat(messages, model="auto", headers=hints) for _ in range(2)]
    assert [s.cache for s in seen] == ["miss", "hit"]
