"""Log probabilities reach the client through both adapters, whole and streamed.

The simulator answers `logprobs` / `top_logprobs` as OpenAI does (each content token, with its
likeliest alternatives); the router relays them: the pass-through adapter as the upstream sent
them, the litellm adapter through litellm's response objects. litellm drops `logprobs` for a
provider that takes none (Anthropic), so such a deployment is not asked for them
(`supports_logprobs`): a model with no other refuses the request.
"""

from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.integration

ASK = [{"role": "user", "content": "Say something short."}]


@pytest.mark.parametrize("model", ["pt-fast", "ll-fast"])
def test_logprobs_are_relayed_whole(client: openai.OpenAI, model: str) -> None:
    answer = client.chat.completions.create(model=model, messages=ASK,  # type: ignore[arg-type]
                                            logprobs=True, top_logprobs=2)
    choice = answer.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token
               for t in choice.logprobs.content)


@pytest.mark.parametrize("model", ["pt-fast", "ll-fast"])
def test_logprobs_are_relayed_in_a_stream(client: openai.OpenAI, model: str) -> None:
    text, tokens = [], []
    for chunk in client.chat.completions.create(model=model, messages=ASK,  # type: ignore[arg-type]
                                                logprobs=True, top_logprobs=2, stream=True):
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            if choice.logprobs is not None and choice.logprobs.content:
                tokens += [t.token for t in choice.logprobs.content]
    assert tokens and "".join(tokens) == "".join(text)


def test_logprobs_are_not_asked_of_a_provider_that_returns_none(client: openai.OpenAI) -> None:
    """litellm drops `logprobs` for Anthropic: the model refuses the request (400, param
    `logprobs`) rather than answering it without them; without them it answers."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="ll-anthropic", messages=ASK,  # type: ignore[arg-type]
                                       logprobs=True, top_logprobs=2)
    body = caught.value.body
    assert isinstance(body, dict) and (body["param"], body["code"]) == ("logprobs",
                                                                         "no_model_fits")
    answer = client.chat.completions.create(model="ll-anthropic", messages=ASK)  # type: ignore[arg-type]
    assert answer.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", ["pt-fast", "ll-fast", "ll-anthropic"])
def test_zero_alternatives_without_logprobs_are_answered_by_every_deployment(
        client: openai.OpenAI, model: str, stream: bool) -> None:
    """`top_logprobs: 0` without `logprobs` asks for nothing. The simulator's OpenAI wire
    refuses it, as a strict server does (vLLM takes it), so it was a 400 through `pt-fast` and
    `ll-fast` and a 200 through `ll-anthropic`: the router leaves it out, and each answers,
    with no log probabilities."""
    if not stream:
        answer = client.chat.completions.create(model=model, messages=ASK,  # type: ignore[arg-type]
                                                top_logprobs=0)
        assert answer.choices[0].message.content and answer.choices[0].logprobs is None
        return
    text = [choice.delta.content or ""
            for chunk in client.chat.completions.create(
                model=model, messages=ASK, top_logprobs=0, stream=True)  # type: ignore[arg-type]
            for choice in chunk.choices if choice.logprobs is None]
    assert "".join(text)
