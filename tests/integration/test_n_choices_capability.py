"""A request for `n` > 1 choices goes only to deployments that answer them.

litellm drops `n` for providers that take none (Anthropic, Bedrock, Mistral, Ollama) with the
`drop_params` the adapter sets: such a deployment answered a request for three choices with one,
status 200. Served end to end (the simulator's OpenAI and Anthropic wires, the router as a
process, the real `openai` client): a model whose every deployment answers one choice refuses
`n` > 1 with a 400 naming `n`; a model with a replica that answers them is served by it; a
policy ranks such deployments out for `n` > 1 and keeps them for one choice.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of
from tests.support.services import Running

pytestmark = pytest.mark.integration

PROMPTS = [f"Question {word}: name a colour." for word in ("one", "two", "three", "four", "five")]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("n-choices")) as served:
        yield served.router


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_whose_providers_take_no_n_refuses_several_choices(router: Running,
                                                                   stream: bool) -> None:
    client = client_of(router)
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
    client = client_of(router)
    for prompt in PROMPTS:
        raw = client.chat.completions.with_raw_response.create(
            model=model, n=2, messages=[{"role": "user", "content": prompt}])
        assert raw.headers["x-slorouter-model"] == "gpt-m"
        assert [c.index for c in raw.parse().choices] == [0, 1]
    if model == "auto":
        single = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": PROMPTS[0]}])
        assert single.headers["x-slorouter-model"] == "claude-m"
