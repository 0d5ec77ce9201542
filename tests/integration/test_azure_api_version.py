"""An Azure OpenAI deployment's `api_version` reaches Azure: litellm's default went out
whatever the config said (the schema had no field, and an `?api-version=` in api_base is
replaced by litellm's own), so a resource that lacks that version answered 404 to every call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import ClassVar

import openai
import pytest

from policies.loader import PolicyValidationError, load_config_text
from tests.support.fake_upstream import QuietHandler, send_body, serve_in_thread
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

ANSWER = {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "Hello."}}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


class AzureLike(QuietHandler):
    """Answers every POST; keeps the paths (with their query) it was sent."""

    paths: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        AzureLike.paths.append(self.path)
        send_body(self, 200, json.dumps(ANSWER).encode())


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    server, base = serve_in_thread(AzureLike)
    running = start_router(tmp_path_factory.mktemp("azure"), f"""version: 1
deployments:
  - {{name: az, model: azure/my-gpt4o, api_base: '{base}', api_key: env:AZ_KEY,
     api_version: '2024-10-21', input_price_per_mtok: 2.5, output_price_per_mtok: 10}}
models: [{{name: gpt, deployments: [az]}}]
routes: {{default_model: gpt}}
""", env={"AZ_KEY": "az-key-0123456789"})
    yield running
    running.stop()
    server.shutdown()


def test_the_deployment_s_api_version_is_sent(router: Running) -> None:
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="gpt",
                                           messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content == "Hello."
    assert AzureLike.paths, "nothing reached the upstream"
    path = AzureLike.paths[-1]
    assert path.startswith("/openai/deployments/my-gpt4o/chat/completions"), path
    assert "api-version=2024-10-21" in path, path


def test_api_version_is_refused_where_nothing_would_send_it() -> None:
    with pytest.raises(PolicyValidationError, match="api_version"):
        load_config_text("""version: 1
deployments:
  - {name: d, model: openai/m, adapter: openai_passthrough, api_base: 'http://127.0.0.1:9/v1',
     api_version: '2024-10-21', input_price_per_mtok: 1, output_price_per_mtok: 1}
models: [{name: m, deployments: [d]}]
routes: {default_model: m}
""")
