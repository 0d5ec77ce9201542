"""A `json_schema` answer its output limit cut says `length`, through litellm to Anthropic too.

litellm asks Anthropic for a `json_schema` answer through a forced tool and reported every
such whole answer `stop`: one cut at `max_tokens` came back as `{}` with `stop`, so the
openai SDK's `parse()` took the cut answer for a whole one (a validation error, or an empty
object when every field is optional) where it raises `LengthFinishReasonError` (the API audit
of 2026-12-07; the stream said `length`). Served end to end: the simulator's Anthropic wire,
the router as a process, the real `openai` client.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pydantic
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of
from tests.support.services import Running

pytestmark = pytest.mark.integration

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "Give the largest city of France as JSON."}]


class City(pydantic.BaseModel):
    city: str
    population: int


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("cut-schema")) as served:
        yield served.router


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_a_cut_schema_answer_says_length(router: Running, model: str) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        client_of(router).chat.completions.parse(
            model=model, messages=MESSAGES, response_format=City, max_completion_tokens=3)


@pytest.mark.parametrize("model", ["claude", "gpt"])
def test_a_whole_schema_answer_says_stop(router: Running, model: str) -> None:
    reply = client_of(router).chat.completions.create(
        model=model, messages=MESSAGES, max_completion_tokens=200,
        response_format={"type": "json_schema", "json_schema": {
            "name": "city", "schema": City.model_json_schema()}})
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens < 200
