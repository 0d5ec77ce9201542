"""What litellm's translation to Anthropic drops, answering 200 without it, is not sent there.

Measured with the litellm of requirements.lock (its own parameter mapping is asked, per model,
at start-up): a json_object `response_format` maps to nothing for Anthropic (prose came back), a
json_schema beside tools becomes litellm's own forced tool (the client's tools were never
called), and the legacy `functions` are dropped (prose, no function call). Served end to end
(the simulator's OpenAI and Anthropic wires, the router as a process, the real `openai`
client): `auto` routes such requests to the deployment that carries them; a model whose
deployments all drop them refuses with a 400 naming the field, as for `n` and `logprobs`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.claude_and_gpt import claude_and_gpt, client_of
from tests.support.services import Running

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Give me the weather as JSON."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "weather", "schema": {
    "type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}}}
FUNCTIONS = [{"name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with claude_and_gpt(tmp_path_factory.mktemp("dropped")) as served:
        yield served.router


CASES: dict[str, tuple[dict[str, Any], str]] = {
    "json_object": ({"response_format": {"type": "json_object"}}, "response_format"),
    "schema_beside_tools": ({"response_format": SCHEMA, "tools": [WEATHER]}, "response_format"),
    "legacy_functions": ({"functions": FUNCTIONS}, "functions"),
}


@pytest.mark.parametrize("case", CASES)
def test_auto_sends_it_to_the_deployment_that_carries_it(router: Running, case: str) -> None:
    fields, _ = CASES[case]
    reply = client_of(router).chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, extra_body=fields)  # type: ignore[arg-type]
    assert reply.headers["x-slorouter-model"] == "gpt-m"
    message = reply.parse().choices[0].message
    if case == "json_object":
        assert isinstance(json.loads(message.content or ""), dict)
    elif case == "legacy_functions":
        assert message.function_call is not None or message.tool_calls or message.content


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_model_whose_deployments_drop_it_refuses_it_naming_the_field(
        router: Running, case: str, stream: bool) -> None:
    fields, param = CASES[case]
    with pytest.raises(openai.BadRequestError) as caught:
        client_of(router).chat.completions.create(model="claude", messages=MESSAGES,
                                                stream=stream, extra_body=fields)  # type: ignore[arg-type]
    body = caught.value.body
    assert isinstance(body, dict)
    assert (body["param"], body["code"]) == (param, "no_model_fits")


def test_what_it_carries_still_goes_to_it(router: Running) -> None:
    """A json_schema alone (litellm forces its tool: the answer is the JSON), and tools alone."""
    client = client_of(router)
    schema = client.chat.completions.with_raw_response.create(
        model="auto", messages=MESSAGES, response_format=SCHEMA)  # type: ignore[arg-type]
    assert schema.headers["x-slorouter-model"] == "claude-m"
    assert "summary" in json.loads(schema.parse().choices[0].message.content or "")
    tools = client.chat.completions.with_raw_response.create(
        model="claude", messages=MESSAGES, tools=[WEATHER])  # type: ignore[list-item]
    assert tools.parse().choices[0].message.tool_calls
