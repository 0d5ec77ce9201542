"""Audio is never sent where the adapter drops it.

litellm's translation to Anthropic's Messages API drops `input_audio` content parts (the model
answered "what is said in this recording?" without the recording) and spoken output
(`modalities` with audio, `audio`), and the answer came back 200. Served end to end (the
simulator's two wires, the router as a process, the real `openai` client): `auto` routes such
requests to the deployment that carries them; a model whose deployments all drop them is a 400
`no_model_fits` naming the field.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of
from tests.support.services import Running

pytestmark = pytest.mark.integration

RECORDING: list[Any] = [
    {"type": "text", "text": "What is said in this recording?"},
    {"type": "input_audio",
     "input_audio": {"data": base64.b64encode(b"RIFF....WAVE").decode(), "format": "wav"}}]
HEARD = {"messages": [{"role": "user", "content": RECORDING}]}
SPOKEN = {"messages": [{"role": "user", "content": "Say hello."}],
          "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("audio")) as served:
        yield served.router


@pytest.mark.parametrize("asked", [HEARD, SPOKEN], ids=["input_audio", "modalities"])
def test_auto_sends_audio_to_a_deployment_that_carries_it(router: Running,
                                                          asked: dict[str, Any]) -> None:
    reply = client_of(router).chat.completions.with_raw_response.create(
        model="auto", messages=asked["messages"],
        extra_body={k: v for k, v in asked.items() if k != "messages"})
    assert reply.headers["x-slorouter-model"] == "gpt-m"
    plain = client_of(router).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Say hello."}])
    assert plain.headers["x-slorouter-model"] == "claude-m"  # the policy's first choice


@pytest.mark.parametrize(("asked", "param"), [(HEARD, "messages"), (SPOKEN, "modalities")],
                         ids=["input_audio", "modalities"])
def test_a_model_that_drops_it_refuses_it(router: Running, asked: dict[str, Any],
                                          param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client_of(router).chat.completions.create(
            model="claude", messages=asked["messages"],
            extra_body={k: v for k, v in asked.items() if k != "messages"})
    assert caught.value.code == "no_model_fits"
    assert caught.value.param == param
