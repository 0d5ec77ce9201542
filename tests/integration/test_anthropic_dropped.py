"""An Anthropic upstream that drops the connection after the request: the side effect is not run
twice.

litellm's Anthropic path reports the drop as its `InternalServerError` over httpx's `ReadError`,
which the router read as the 503 a provider answers without acting: a side-effecting agent turn
was retried (two upstream calls, six with the SDK's own retries) and its Idempotency-Key given
back, so the same key ran it again (the agent tool-loop audit of 2026-12-07). It is
`upstream_dropped` now, as through litellm's OpenAI path and the pass-through: a side effect is a
504 `unknown_commit` after one call, a read is retried and then a 502 `upstream_dropped`.
Served end to end: a socket server that reads each request and closes, the router as a process,
the real `openai` client.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

API_KEY = "sk-test-anthropic-dropped"
SEND_EMAIL: Any = [{"type": "function", "function": {
    "name": "send_email", "description": "Send an e-mail to a recipient.",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]


class Dropper:
    """Reads each request's first bytes, then closes the connection without a word."""

    def __init__(self) -> None:
        self.requests = 0
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                if connection.recv(65536):
                    self.requests += 1

    def stop(self) -> None:
        self._socket.close()


@pytest.fixture(scope="module")
def dropper() -> Iterator[Dropper]:
    running = Dropper()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, dropper: Dropper) -> Iterator[Running]:
    config = f"""version: 1
deployments:
  - {{name: claude, model: anthropic/claude-haiku-4-5, adapter: litellm,
     api_base: '{dropper.base_url}', api_key: env:UP_KEY, input_price_per_mtok: 1,
     output_price_per_mtok: 5, max_output_tokens: 256, timeout_s: 10}}
models: [{{name: claude, deployments: [claude]}}]
routes: {{default_model: claude}}
api_keys: [{{key: env:TENANT_KEY, tenant: t}}]
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 1}}
"""
    running = start_router(tmp_path_factory.mktemp("anthropic-dropped"), config,
                           env={"TENANT_KEY": API_KEY, "UP_KEY": "sk-ant-test"})
    yield running
    running.stop()


def _client(gateway: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


def test_a_side_effect_whose_connection_dropped_is_an_unknown_commit_after_one_call(
        gateway: Running, dropper: Dropper) -> None:
    before = dropper.requests
    with pytest.raises(openai.APIStatusError) as caught:
        _client(gateway).chat.completions.create(
            model="claude", tools=SEND_EMAIL,
            messages=[{"role": "user", "content": "E-mail Dana that the report is late."}])
    body: Any = caught.value.body
    assert (caught.value.status_code, body["code"]) == (504, "unknown_commit"), body
    assert caught.value.response.headers.get("x-should-retry") == "false"
    assert dropper.requests - before == 1


def test_a_read_whose_connection_dropped_is_retried_then_upstream_dropped(
        gateway: Running, dropper: Dropper) -> None:
    before = dropper.requests
    with pytest.raises(openai.APIStatusError) as caught:
        _client(gateway).chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "What is the capital of Peru?"}])
    body: Any = caught.value.body
    assert (caught.value.status_code, body["code"]) == (502, "upstream_dropped"), body
    assert dropper.requests - before == 2  # the retry the deployment allows
