"""The cost ceiling prices a prompt the router marks for Anthropic's prompt cache at the cache
write price: on a miss the provider bills the marked prefix at 1.25 times the input price, so a
worst case at the input price let a request over the ceiling (the cost audit: a $0.013 ceiling,
a worst case of $0.012963, a bill of $0.014781). OpenAI-wire deployments, whose prompt cache
has no write premium, keep the input price."""

from __future__ import annotations

import pytest

from policies.eligibility import RequestFacts, output_cap, worst_case_cost
from policies.loader import load_config_text
from router.runtime_config import RuntimeConfig, resolve

CONFIG = """version: 1
deployments:
  - {name: claude-1, model: anthropic/claude-x, adapter: litellm, api_key: env:KEY,
     input_price_per_mtok: 3.0, output_price_per_mtok: 15.0, cache_write_price_per_mtok: 3.75}
  - {name: gpt-1, model: openai/gpt-x, adapter: openai_passthrough, api_base: 'http://127.0.0.1:9/v1',
     api_key: env:KEY, input_price_per_mtok: 3.0, output_price_per_mtok: 15.0,
     cache_write_price_per_mtok: 3.75}
models:
  - {name: claude, deployments: [claude-1]}
  - {name: gpt, deployments: [gpt-1]}
routes: {default_model: claude}
"""
ENV = {"KEY": "sk-test"}


def _runtime() -> RuntimeConfig:
    return resolve(load_config_text(CONFIG, environ=ENV), ENV, lambda _m: None)


def test_a_prompt_marked_for_anthropics_cache_is_priced_at_the_write_price() -> None:
    runtime = _runtime()
    claude, gpt = runtime.model_facts["claude"][0], runtime.model_facts["gpt"][0]
    facts = RequestFacts(task="chat", risk="low", prompt_tokens=3900, max_output_tokens=100)
    assert worst_case_cost(facts, claude) == pytest.approx((3900 * 3.75 + 100 * 15.0) / 1e6)
    assert worst_case_cost(facts, gpt) == pytest.approx((3900 * 3.0 + 100 * 15.0) / 1e6)
    deployment = runtime.deployments["claude-1"]
    # what the provider may bill: every prompt token written into its cache
    assert worst_case_cost(facts, claude) == pytest.approx(deployment.cost_usd(3900, 100, 0, 3900))


def test_the_output_cap_leaves_room_for_the_write_premium() -> None:
    """The cap the router sends under a $0.013 ceiling keeps a fully written prompt within it."""
    deployment = _runtime().deployments["claude-1"]
    facts = RequestFacts(task="chat", risk="low", prompt_tokens=3000, max_output_tokens=512)
    cap = output_cap(0.013, facts, [(deployment.worst_prompt_price_per_mtok,
                                     deployment.output_price_per_mtok)])
    assert cap is not None
    assert deployment.cost_usd(3000, cap, 0, 3000) <= 0.013
    assert deployment.cost_usd(3000, cap + 1, 0, 3000) > 0.013
