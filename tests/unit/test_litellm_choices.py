"""Which deployments answer `n` > 1 choices (`supports_n`) and log probabilities
(`supports_logprobs`): unset, a pass-through deployment does, and a litellm one does when
litellm passes the field on to its provider (with `drop_params` it drops it for those that take
none, and one choice, or no log probabilities, come back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.loader import load_config_text
from router.providers.litellm_adapter import _cut_schema_answers_say_length, passes_field
from router.wiring import build_runtime


@pytest.mark.parametrize(("model", "passing"), [
    ("openai/gpt-4o-mini", True), ("groq/llama-3.1-8b-instant", True),
    ("anthropic/claude-3-5-sonnet-20241022", False),
    ("bedrock/anthropic.claude-3-sonnet-20240229-v1:0", False),
    ("mistral/mistral-large-latest", False), ("ollama/llama3", False),
    ("no-such-provider/model", True)])  # unknown: the provider answers for itself
def test_litellm_says_which_providers_take_n_and_logprobs(model: str, passing: bool) -> None:
    assert passes_field(model, "n") is passing
    assert passes_field(model, "logprobs") is passing


def test_supports_n_is_inferred_unless_the_config_says(tmp_path: Path) -> None:
    config = load_config_text("""version: 1
deployments:
  - {name: claude, model: anthropic/claude-3-5-sonnet-20241022, api_key: env:K,
     input_price_per_mtok: 3, output_price_per_mtok: 15}
  - {name: claude-n, model: anthropic/claude-3-5-sonnet-20241022, api_key: env:K,
     input_price_per_mtok: 3, output_price_per_mtok: 15, supports_n: true,
     supports_logprobs: true}
  - {name: gpt, model: openai/gpt-4o-mini, api_key: env:K,
     input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: local, model: openai/m, adapter: openai_passthrough, api_base: "http://127.0.0.1:1/v1",
     input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: local-one, model: openai/m, adapter: openai_passthrough,
     api_base: "http://127.0.0.1:1/v1", input_price_per_mtok: 1, output_price_per_mtok: 1,
     supports_n: false}
models:
  - {name: all, deployments: [claude, claude-n, gpt, local, local-one]}
routes: {default_model: all}
""")
    runtime, _ = build_runtime(config, {"K": "sk-test-0123456789"}, tmp_path)
    answers_n = {name: d.supports_n for name, d in runtime.deployments.items()}
    assert answers_n == {"claude": False, "claude-n": True, "gpt": True, "local": True,
                         "local-one": False}
    assert {f.name: f.supports_n for f in runtime.model_facts["all"]} == answers_n
    logprobs = {name: d.supports_logprobs for name, d in runtime.deployments.items()}
    assert logprobs == {"claude": False, "claude-n": True, "gpt": True, "local": True,
                        "local-one": True}
    assert {f.name: f.supports_logprobs for f in runtime.model_facts["all"]} == logprobs


def test_ollama_s_chat_translation_drops_tool_choice_though_its_list_names_it() -> None:
    assert passes_field("ollama_chat/llama3.1", "tools")
    assert not passes_field("ollama_chat/llama3.1", "tool_choice")


def test_what_litellm_drops_for_a_provider_is_known_per_deployment(tmp_path: Path) -> None:
    """litellm's parameter table: `tools` and `tool_choice` for Fireworks models without
    function calling, `tool_choice` for every Fireworks model it lists, `stop` for xAI's
    reasoning models, spoken output for Anthropic's (and `input_audio` parts, which its
    translation never carries); a pass-through deployment sends all of them."""
    config = load_config_text("""version: 1
deployments:
  - {name: fw-8b, model: fireworks_ai/accounts/fireworks/models/llama-v3p1-8b-instruct,
     api_key: env:K, input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: grok-mini, model: xai/grok-3-mini, api_key: env:K,
     input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: claude, model: anthropic/claude-3-5-sonnet-20241022, api_key: env:K,
     input_price_per_mtok: 3, output_price_per_mtok: 15}
  - {name: gpt, model: openai/gpt-4o-mini, api_key: env:K,
     input_price_per_mtok: 1, output_price_per_mtok: 1}
  - {name: local, model: openai/m, adapter: openai_passthrough, api_base: "http://127.0.0.1:1/v1",
     input_price_per_mtok: 1, output_price_per_mtok: 1}
models:
  - {name: all, deployments: [fw-8b, grok-mini, claude, gpt, local]}
routes: {default_model: all}
""")
    runtime, _ = build_runtime(config, {"K": "sk-test-0123456789"}, tmp_path)
    facts = {f.name: f for f in runtime.model_facts["all"]}
    carried = {name: (f.passes_tools, f.supports_tool_choice, f.supports_stop,
                      f.supports_audio_input, f.supports_audio_output)
               for name, f in facts.items()}
    assert carried == {"fw-8b": (False, False, True, True, False),
                       "grok-mini": (True, True, False, True, False),
                       "claude": (True, True, True, False, False),
                       "gpt": (True, True, True, True, True),
                       "local": (True, True, True, True, True)}


def _schema_answer(choices: int, used: int) -> dict[str, object]:
    return {"choices": [{"index": i, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "{}"}}
                        for i in range(choices)],
            "usage": {"prompt_tokens": 10, "completion_tokens": used}}


SCHEMA_REQUEST = {"max_tokens": 100, "response_format": {
    "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}


def test_a_cut_schema_answer_says_length_and_whole_ones_stop() -> None:
    """litellm reports every `json_schema` answer of a provider of its own wire `stop`: one that
    used its whole limit was cut. With several choices the usage counts them together, so no
    one choice is known to be cut (two finished choices of 60 tokens read `length` against a
    limit of 100 each: the re-audit of 2026-12-07)."""
    cut = _schema_answer(1, 100)
    _cut_schema_answers_say_length(cut, SCHEMA_REQUEST)
    assert cut["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
    for body in (_schema_answer(1, 99), _schema_answer(2, 120)):
        _cut_schema_answers_say_length(body, SCHEMA_REQUEST)
        assert {c["finish_reason"] for c in body["choices"]} == {"stop"}  # type: ignore[attr-defined]
    prose = _schema_answer(1, 100)
    _cut_schema_answers_say_length(prose, {"max_tokens": 100})
    assert prose["choices"][0]["finish_reason"] == "stop"  # type: ignore[index]
