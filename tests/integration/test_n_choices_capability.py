"""A request for `n` > 1 choices goes only to deployments that answer them.

litellm drops `n` for providers that take none (Anthropic, Bedrock, Mistral, Ollama) with the
`drop_params` the adapter sets: such a deployment answered a request for three choices with one,
status 200. Served end to end (the simulator's OpenAI and Anthropic wires, the router as a
process, the real `openai` client): a model whose every deployment answers one choice refuses
`n` > 1 with a 400 naming `n`; a model with a replica that answers them is served by it; a
policy ranks such deployments out for `n` > 1 and keeps them for one choice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import openai
import pytest

from tests.support.services import FAST_PROFILE, Running, start_router, start_simulator

pytestmark = pytest.mark.integration

PROMPTS = [f"Question {word}: name a colour." for word in ("one", "two", "three", "four", "five")]


def _config(sim_base: str) -> str:
    """`claude` (Anthropic through litellm: no `n`), `gpt` (pass-through), `mixed` (both), and
    a policy for `auto` that ranks the cheaper `claude` first (exploration off: a probe may
    send a request to the dearer one)."""
    return f"""version: 1
deployments:
  - {{name: claude-m, model: anthropic/m, adapter: litellm, api_base: {sim_base},
     api_key: env:SIM_KEY, input_price_per_mtok: 0.1, output_price_per_mtok: 0.1}}
  - {{name: gpt-m, model: openai/m, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models:
  - {{name: claude, deployments: [claude-m]}}
  - {{name: gpt, deployments: [gpt-m]}}
  - {{name: mixed, deployments: [claude-m, gpt-m]}}
routes: {{default_model: gpt, aliases: [auto]}}
policies:
  default: {{candidates: [claude, gpt], objective: min_cost}}
server: {{cache: {{backend: none}}, stats: {{explore_share: 0}}}}
"""


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("n-choices")
    with contextlib.ExitStack() as stack:
        sim = start_simulator(directory, {"m": FAST_PROFILE})
        stack.callback(sim.stop)
        running = start_router(directory, _config(sim.base_url), env={"SIM_KEY": "sim-key"})
        stack.callback(running.stop)
        yield running


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0,
                         timeout=20)


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_whose_providers_take_no_n_refuses_several_choices(router: Running,
                                                                   stream: bool) -> None:
    client = _client(router)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="claude", n=3, stream=stream,
                                       messages=[{"role": "user", "content": PROMPTS[0]}])
    body = caught.value.body
    assert isinstance(body, dict)
    assert (body["param"], body["code"]) == ("n", "no_model_fits")
    one = client.chat.completions.with_raw_response.create(
        model="claude", messages=[{"role": "user", "content": PROMPTS[0]}])
    assert one.headers["x-slorouter-model"] == "claude-m"
    assert len(one.parse().choices) == 1


@pytest.mark.parametrize("model", ["mixed", "auto"])
def test_several_choices_go_to_a_deployment_that_answers_them(router: Running,
                                                              model: str) -> None:
    """`mixed` spreads prompts over both replicas by prefix; `auto`'s policy ranks the cheaper
    Anthropic deployment first. Asked for two choices, every request is served by the OpenAI
    one, with two choices; asked for one, the policy's cheapest serves."""
    client = _client(router)
    for prompt in PROMPTS:
        raw = client.chat.completions.with_raw_response.create(
            model=model, n=2, messages=[{"role": "user", "content": prompt}])
        assert raw.headers["x-slorouter-model"] == "gpt-m"
        assert [c.index for c in raw.parse().choices] == [0, 1]
    if model == "auto":
        single = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": PROMPTS[0]}])
        assert single.headers["x-slorouter-model"] == "claude-m"
