"""An answer through litellm carries OpenAI's fields, not litellm's own additions.

litellm put its own price of the answer in the usage (`usage.cost`, from its table: the audit's
client saw 9e-05 where the deployment's configured price, which the router bills and reports,
gave 1.7e-05) and an empty `provider_specific_fields` on every choice; its answers from
Anthropic left out the nulls OpenAI sends (`logprobs`, `refusal`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("litellm-fields")
    sim = start_simulator(directory, {"m": FAST_PROFILE})
    running = start_router(directory, f"""version: 1
deployments:
  - {{name: ll, model: openai/m, adapter: litellm, api_base: '{sim.base_url}/v1',
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1}}
  - {{name: claude, model: anthropic/m, adapter: litellm, api_base: '{sim.base_url}',
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: m, deployments: [ll]}}, {{name: claude-m, deployments: [claude]}}]
routes: {{default_model: m}}
""", env={"SIM_KEY": "sim-key"})
    yield running
    running.stop()
    sim.stop()


def _litellm_fields(body: dict[str, Any]) -> list[str]:
    found = [f"usage.{k}" for k in body.get("usage") or {} if k == "cost"]
    return found + ["choices[].provider_specific_fields" for choice in body["choices"]
                    if "provider_specific_fields" in choice]


def test_whole_and_streamed_answers_carry_no_litellm_fields(router: Running) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    whole = httpx.post(f"{router.base_url}/v1/chat/completions", json=request, timeout=30)
    assert whole.status_code == 200, whole.text
    assert whole.json()["usage"]["completion_tokens"] > 0
    assert _litellm_fields(whole.json()) == []
    streamed = httpx.post(f"{router.base_url}/v1/chat/completions", timeout=30, json={
        **request, "stream": True, "stream_options": {"include_usage": True}})
    chunks = [orjson.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]
    assert any(chunk.get("usage") for chunk in chunks)
    assert [field for chunk in chunks for field in _litellm_fields(chunk)] == []


@pytest.mark.parametrize("model", ["m", "claude-m"])
def test_a_whole_answer_carries_the_nulls_openai_sends(router: Running, model: str) -> None:
    """`choices[].logprobs` and `message.refusal` are null, not absent, as OpenAI sends them
    and the SDKs' types require: litellm's answers from Anthropic left both out, and
    TypeScript code testing `message.refusal !== null` read a refusal into every answer."""
    whole = httpx.post(f"{router.base_url}/v1/chat/completions", timeout=30, json={
        "model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]})
    assert whole.status_code == 200, whole.text
    choice = whole.json()["choices"][0]
    assert "logprobs" in choice and choice["logprobs"] is None
    assert "refusal" in choice["message"] and choice["message"]["refusal"] is None
    assert choice["message"]["content"]
