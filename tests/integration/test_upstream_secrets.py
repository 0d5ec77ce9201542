"""An upstream that quotes the API key it was sent never passes the key on to the client.

Verbose OpenAI-compatible servers and gateways put the credentials they got in their error
messages ("Incorrect API key provided: Bearer sk-…"); the router turns upstream errors into its
own, with the upstream's message, code and param, so it must take the key out. The upstream here
echoes the `Authorization` it received in every field of its error, at the status its path
names, or as an error event inside a stream it began with 200. One deployment's key has the
usual `sk-` shape; the other's is a plain word, known only as that deployment's key.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.fake_upstream import send_body, serve_in_thread
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

API_KEY = "sk-test-upstream-secrets"
SHAPED_KEY = "sk-shaped1234567890abcdef"
PLAIN_KEY = "plainword7secret"
MESSAGES: Any = [{"role": "user", "content": "hello there"}]


class _Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        sent = self.headers.get("authorization", "")
        key = sent.removeprefix("Bearer ")
        error = {"message": f"Incorrect API key provided: {sent} ({key})", "type": "invalid",
                 "code": key, "param": f"key={key}"}
        status = int(self.path.split("/")[1].removeprefix("s"))
        if status == 200:  # a stream that began, then an error event
            send_body(self, 200, f"data: {json.dumps({'error': error})}\n\n".encode(),
                      "text/event-stream")
        else:
            send_body(self, status, json.dumps({"error": error}).encode())

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, base = serve_in_thread(_Echo)
    deployments, models = [], []
    for adapter in ("openai_passthrough", "litellm"):
        for key_env in ("SHAPED", "PLAIN"):
            for status in (400, 429, 500, 200):
                name = f"{adapter[:2]}-{key_env.lower()}-{status}"
                deployments.append(
                    f"  - {{name: {name}, model: openai/m, adapter: {adapter},"
                    f" api_base: '{base}/s{status}/v1', api_key: env:{key_env},"
                    f" input_price_per_mtok: 1, output_price_per_mtok: 1}}")
                models.append(f"  - {{name: {name}, deployments: [{name}]}}")
    config = ("version: 1\ndeployments:\n" + "\n".join(deployments) + "\nmodels:\n"
              + "\n".join(models) + """
routes: {default_model: op-shaped-400}
api_keys: [{key: env:TENANT_KEY, tenant: t, scopes: [read]}]
server:
  cache: {backend: none}
  reliability: {max_retries_per_deployment: 0}
""")
    running = start_router(tmp_path_factory.mktemp("upstream-secrets"), config,
                           env={"TENANT_KEY": API_KEY, "SHAPED": SHAPED_KEY, "PLAIN": PLAIN_KEY})
    yield running
    running.stop()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("status", "stream"), [
    (400, False), (429, False), (500, False),
    (400, True), (429, True), (500, True), (200, True),  # 200: the error comes in the stream
])
@pytest.mark.parametrize("key_env", ["shaped", "plain"])
@pytest.mark.parametrize("adapter", ["op", "li"])
def test_an_upstream_error_quoting_the_key_reaches_the_client_without_it(
        gateway: Running, adapter: str, key_env: str, status: int, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0,
                           timeout=30)
    model = f"{adapter}-{key_env}-{status}"
    seen = ""
    try:
        if stream:
            for chunk in client.chat.completions.create(model=model, messages=MESSAGES,
                                                        stream=True):
                seen += chunk.model_dump_json()
        else:
            seen = client.chat.completions.create(model=model, messages=MESSAGES).to_json()
    except openai.APIError as caught:
        seen += json.dumps(caught.body) + str(caught)
    assert "Incorrect API key provided" in seen  # the upstream's message reached the client
    assert SHAPED_KEY not in seen and PLAIN_KEY not in seen, seen
