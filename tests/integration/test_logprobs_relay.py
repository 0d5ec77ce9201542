"""Log probabilities reach the client through both adapters, whole and streamed.

The simulator answers `logprobs` / `top_logprobs` as OpenAI does (each content token, with its
likeliest alternatives); the router relays them: the pass-through adapter as the upstream sent
them, the litellm adapter through litellm's response objects. Through litellm to a provider
that takes no `logprobs` (Anthropic) they are dropped: the answer carries none (known-limits).
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


def test_logprobs_asked_of_anthropic_through_litellm_come_back_null(
        client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="ll-anthropic", messages=ASK,  # type: ignore[arg-type]
                                            logprobs=True, top_logprobs=2)
    assert answer.choices[0].message.content
    assert answer.choices[0].logprobs is None
