"""No output limit sent upstream is above the deployment's `max_output_tokens`.

A model writes at most so many tokens in one answer, fewer than its context window, and refuses
a request that asks for more (400, as the simulator's `max_output_tokens` does, worded as
OpenAI). A cost ceiling's cap (cheap output: ~16,600 tokens within $0.01) and a client's own
`max_tokens` were sent as they were, so the provider's 400 reached the client; the router now
lowers them to the deployment's `max_output_tokens`, and the answer is cut there
(`finish_reason: length`).
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from policies.eligibility import DeploymentFacts, RequestFacts, evaluate, output_tokens
from policies.eval_report import QualityTable
from policies.loader import content_hash
from policies.schema import DeploymentSpec, RouterConfig, TaskPolicy
from tests.support.services import Running, simulated_gateway

pytestmark = pytest.mark.integration

API_KEY = "sk-test-max-output"
MOST = 300  # the model's most output tokens per answer
WINDOW = 8192


def _config(base_url: str, most: int | None = MOST) -> str:
    most_yaml = f", max_output_tokens: {most}" if most is not None else ""
    return f"""version: 1
deployments:
  - {{name: capped-1, model: openai/capped, adapter: openai_passthrough,
     api_base: '{base_url}/v1', input_price_per_mtok: 0.15, output_price_per_mtok: 0.60,
     context_window: {WINDOW}{most_yaml}}}
models: [{{name: capped, deployments: [capped-1]}}]
routes: {{default_model: capped}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
policies:
  default: {{candidates: [capped], max_cost_per_request_usd: 0.01}}
server: {{cache: {{backend: none}}}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with simulated_gateway(tmp_path_factory.mktemp("max-output"), {"capped": {
            "context_window": WINDOW, "max_output_tokens": MOST, "output_tokens_p50": 1000,
            "output_tokens_p99": 1200, "tokens_per_chunk": 50}}, _config,
            {"TENANT_KEY": API_KEY}) as running:
        yield running


MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "write a long story"}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("model", "limit"), [
    ("auto", None),  # the cost ceiling's cap (~16,600 tokens)
    ("auto", {"max_tokens": 5000}),
    ("capped", {"max_completion_tokens": 5000}),  # pinned: lowered too, not refused
    ("capped", {"max_tokens": 5000, "max_completion_tokens": 6000}),
])
def test_an_output_limit_above_the_models_maximum_is_lowered_to_it(
        gateway: Running, model: str, limit: dict[str, int] | None, stream: bool) -> None:
    """The provider is sent `max_output_tokens`, not the larger limit, and answers: the answer
    stops at the model's maximum with `finish_reason: length`."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    extra = limit if limit is not None else {}
    if stream:
        chunks = list(client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True},
            extra_body=extra))
        usage = next(c.usage for c in chunks if c.usage is not None)
        finish = next(c.choices[0].finish_reason for c in chunks
                      if c.choices and c.choices[0].finish_reason)
    else:
        reply = client.chat.completions.create(model=model, messages=MESSAGES, extra_body=extra)
        assert reply.usage is not None
        usage, finish = reply.usage, reply.choices[0].finish_reason
    assert finish == "length" and usage.completion_tokens == MOST, (usage, finish)


def test_a_limit_under_the_maximum_is_sent_as_it_is(gateway: Running) -> None:
    """Nothing changes for a request that asks for less than the model can write."""
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=60)
    reply = client.chat.completions.create(model="auto", messages=MESSAGES, max_tokens=40)
    assert reply.usage is not None and reply.usage.completion_tokens == 40


def _facts(most: int | None) -> DeploymentFacts:
    return DeploymentFacts(name="d", model="m", context_window=WINDOW, supports_tools=True,
                           supports_json=True, zero_data_retention=False, price_in_per_m=1.0,
                           price_out_per_m=10.0, max_output_tokens=most)


def test_fit_and_worst_case_cost_count_the_lowered_limit() -> None:
    """A 2,000-token prompt asking for 7,000 tokens does not fit an 8,192 window as asked, but
    it is sent at most 4,096: it fits, and is priced at 4,096 output tokens."""
    request = RequestFacts(task="chat", risk="low", prompt_tokens=2000, max_output_tokens=7000)
    policy = TaskPolicy(candidates=("m",))
    quality = QualityTable.empty()
    unknown, known = (evaluate(policy, request, {"m": (_facts(most),)}, quality)[0]
                      for most in (None, 4096))
    assert not unknown.eligible and known.eligible
    assert output_tokens(request, _facts(4096)) == 4096
    assert known.cost_usd == pytest.approx((2000 * 1.0 + 4096 * 10.0) / 1e6)


def test_max_output_tokens_is_validated_and_part_of_the_policy_version() -> None:
    """It is at most the context window, and changing it changes the policy version (it
    changes which deployments fit and where answers are cut)."""
    with pytest.raises(ValueError, match="max_output_tokens"):
        DeploymentSpec(name="d", model="openai/m", context_window=100, max_output_tokens=101)
    versions = set()
    for most in (None, 300, 400):
        config = RouterConfig.model_validate_json(_yaml_as_json(_config("http://x", most)))
        versions.add(content_hash(config))
    assert len(versions) == 3


def _yaml_as_json(text: str) -> str:
    import json

    import yaml
    return json.dumps(yaml.safe_load(text))
