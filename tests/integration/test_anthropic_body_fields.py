"""A request's `top_k` reaches Anthropic as Anthropic's own field, through litellm.

Fields outside OpenAI's list go to litellm in `extra_body` (never as litellm's own arguments:
`test_litellm_body_fields.py`). For a provider on OpenAI's wire that is the request's JSON; for
Anthropic litellm nests them under a literal `extra_body` key, which Anthropic refuses (400
"Extra inputs are not permitted"), so a client's `top_k` never applied and the request failed
(the Anthropic audit of 2026-12-07). `top_k`, a litellm argument of no meaning to litellm itself,
is now given as an argument for providers off OpenAI's wire, and reaches Anthropic at the top
level. Served end to end: a recording upstream speaking Anthropic's Messages API, the router as a
process, the real `openai` client.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import Any, ClassVar

import openai
import pytest

from tests.support.fake_upstream import send_body, serve_in_thread
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

API_KEY = "sk-test-anthropic-fields"


class _Messages(http.server.BaseHTTPRequestHandler):
    """Anthropic's Messages API, answering every request with one short text; notes each body."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        send_body(self, 200, json.dumps({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}).encode())

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, base = serve_in_thread(_Messages)
    config = f"""version: 1
deployments:
  - {{name: claude, model: anthropic/claude-haiku-4-5, adapter: litellm, api_base: '{base}',
     api_key: env:UP_KEY, input_price_per_mtok: 1, output_price_per_mtok: 5,
     max_output_tokens: 256}}
models: [{{name: claude, deployments: [claude]}}]
routes: {{default_model: claude}}
api_keys: [{{key: env:TENANT_KEY, tenant: t}}]
server: {{cache: {{backend: none}}}}
"""
    running = start_router(tmp_path_factory.mktemp("anthropic-fields"), config,
                           env={"TENANT_KEY": API_KEY, "UP_KEY": "sk-ant-test"})
    yield running
    running.stop()
    server.shutdown()


def test_top_k_reaches_anthropic_as_its_own_field(gateway: Running) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=30)
    _Messages.bodies.clear()
    reply = client.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": 5})
    assert reply.choices[0].message.content == "hello"
    (sent,) = _Messages.bodies
    assert sent.get("top_k") == 5, sent
    assert "extra_body" not in sent, sent
