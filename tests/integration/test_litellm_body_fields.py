"""A client's body fields reach the provider as request fields, never as litellm's own arguments.

litellm's `acompletion` takes many keyword arguments that are not OpenAI request fields: where to
send the call (`base_url`, `api_base`), with which credentials, a canned answer instead of a call
(`mock_response`), other models to try (`fallbacks`, `model_list`), what the call costs. Passed
through from a client's body, they would send the deployment's API key to an address of the
client's choosing, fake answers (and the latency statistics that route traffic), or call models
the policy never chose. The deployment here has a secret key and points at the simulator; a
second server, the "attacker", records what reaches it; it is also the upstream of a deployment of
its own, to show where the fields go instead: into the request's JSON, as the pass-through sends
them.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import Any, ClassVar

import openai
import pytest

from tests.support.fake_upstream import send_body, serve_in_thread
from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

API_KEY = "sk-test-body-fields"
UPSTREAM_KEY = "sk-upstream-secret-0d9a"
MESSAGES: Any = [{"role": "user", "content": "hello there"}]


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every POST with a chat completion saying "attacker", after noting its headers
    and its JSON body."""

    seen: ClassVar[list[dict[str, str]]] = []
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        self.seen.append(dict(self.headers))
        self.bodies.append(json.loads(self.rfile.read(int(self.headers.get("content-length")
                                                              or 0))))
        body = json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "attacker"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        send_body(self, 200, body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def attacker() -> Iterator[tuple[str, list[dict[str, str]]]]:
    server, base = serve_in_thread(_Recorder)
    yield base, _Recorder.seen
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory,
            attacker: tuple[str, list[dict[str, str]]]) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("body-fields")
    sim = start_simulator(directory, {"m": {}, "other": {}})
    config = f"""version: 1
deployments:
  - {{name: ll, model: openai/m, adapter: litellm, api_base: '{sim.base_url}/v1',
     api_key: env:UP_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1}}
  - {{name: rec, model: openai/m, adapter: litellm, api_base: '{attacker[0]}/v1',
     api_key: env:UP_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: ll, deployments: [ll]}}, {{name: rec, deployments: [rec]}}]
routes: {{default_model: ll}}
api_keys: [{{key: env:TENANT_KEY, tenant: t, scopes: [read]}}]
server: {{cache: {{backend: none}}}}
"""
    running = start_router(directory, config, env={"TENANT_KEY": API_KEY, "UP_KEY": UPSTREAM_KEY})
    yield running
    running.stop()
    sim.stop()


def _client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["base_url", "api_base"])
def test_a_body_cannot_send_the_call_and_its_key_elsewhere(
        gateway: Running, attacker: tuple[str, list[dict[str, str]]], field: str,
        stream: bool) -> None:
    address, seen = attacker
    seen.clear()
    extra = {field: f"{address}/v1"}
    if stream:
        chunks = list(_client(gateway).chat.completions.create(
            model="ll", messages=MESSAGES, stream=True, extra_body=extra))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = _client(gateway).chat.completions.create(
            model="ll", messages=MESSAGES, extra_body=extra).choices[0].message.content or ""
    assert seen == [], "the call (and the deployment's key) went to the client's address"
    assert text and text != "attacker"


@pytest.mark.parametrize("extra", [
    {"mock_response": "canned"},
    {"fallbacks": [{"model": "openai/other"}], "model_list": []},
    {"custom_llm_provider": "anthropic"},
    {"api_key": "sk-client-chosen"},
    {"input_cost_per_token": 0, "output_cost_per_token": 0},
])
def test_litellm_arguments_in_a_body_are_request_fields_not_instructions(
        gateway: Running, extra: dict[str, Any]) -> None:
    reply = _client(gateway).chat.completions.with_raw_response.create(
        model="ll", messages=MESSAGES, extra_body=extra)
    completion = reply.parse()
    assert completion.choices[0].message.content not in (None, "", "canned")
    assert reply.headers["x-slorouter-model"] == "ll"
    assert completion.usage is not None and completion.usage.completion_tokens > 0


def test_the_fields_reach_the_provider_in_the_request_body(
        gateway: Running, attacker: tuple[str, list[dict[str, str]]]) -> None:
    """OpenAI fields and unknown ones alike arrive as JSON fields of the provider's request (the
    latter as the pass-through adapter sends them); litellm's keywords among them are just
    fields there too, and the call keeps the deployment's address and key."""
    _, seen = attacker
    seen.clear()
    _Recorder.bodies.clear()
    extra = {"seed": 7, "frobnicate": {"a": [1, 2]}, "base_url": "http://elsewhere/v1",
             "mock_response": "canned"}
    reply = _client(gateway).chat.completions.create(
        model="rec", messages=MESSAGES, temperature=0.25, extra_body=extra)
    assert reply.choices[0].message.content == "attacker"  # the recorder's own answer
    (body,) = _Recorder.bodies
    assert body["temperature"] == 0.25 and body["seed"] == 7
    assert body["frobnicate"] == {"a": [1, 2]}
    assert body["base_url"] == "http://elsewhere/v1" and body["mock_response"] == "canned"
    assert body["messages"] == MESSAGES and body["model"] == "m"
    assert seen[0]["authorization"] == f"Bearer {UPSTREAM_KEY}"
