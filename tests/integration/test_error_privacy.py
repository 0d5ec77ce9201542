"""Upstream errors that quote the request stay out of the running service's logs and traces.

Real providers put parts of the request in their errors (`Invalid value for
'messages[0].content': '...'`, a 413 with the payload, a content filter quoting the prompt) and
send malformed chunks holding the answer's text. The simulator's `<<fail:KIND>>` marker makes
it do each of these with the prompt (`router.providers.simulator.echo`); the router serves
them through both adapters, with DEBUG logs and every span printed to its output, and the
real `openai` client as the caller. The client may see the quote (it sent the prompt); the
router's output never holds it, nor any key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.conftest import API_KEY, FAST
from tests.support.services import Running, observed_gateway

pytestmark = pytest.mark.integration

# Short, and last in the prompt: pydantic cuts the middle out of the values its errors quote.
CANARY = "okapi-5e1d0b"
SIM_KEY = "sim-key-secret-4821"
ECHOED_FAILURES = ("400", "413", "422", "429", "500", "503", "stream", "chunk")
CONFIG = """version: 1
deployments:
  - {{name: pt-echo, model: openai/fast, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 5}}
  - {{name: ll-echo, model: openai/fast, adapter: litellm, api_base: '{base}/v1',
     api_key: env:SIM_KEY, input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 5}}
models:
  - {{name: pt-echo, deployments: [pt-echo]}}
  - {{name: ll-echo, deployments: [ll-echo]}}
routes: {{default_model: pt-echo}}
api_keys: [{{key: env:TENANT_ONE_KEY, tenant: tenant-one}}]
server:
  cache: {{backend: none}}
  reliability:
    max_retries_per_deployment: 0
    breaker: {{consecutive_failures: 1000000, min_volume: 1000000}}
"""


@pytest.fixture(scope="module")
def echoing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    with observed_gateway(tmp_path_factory.mktemp("echoing"), {"fast": FAST},
                          lambda base: CONFIG.format(base=base),
                          {"TENANT_ONE_KEY": API_KEY, "SIM_KEY": SIM_KEY}) as both:
        yield both


def test_upstream_failures_quoting_the_prompt_leave_it_out_of_logs_and_spans(
        echoing: tuple[Running, Path]) -> None:
    """Every failure the simulator quotes the prompt in, whole and streamed, through either
    adapter: the router's logs and console spans hold neither the prompt nor a key."""
    router, log = echoing
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    failed = 0
    for model in ("pt-echo", "ll-echo"):
        for kind in ECHOED_FAILURES:
            for stream in (False, True):
                messages: list[ChatCompletionMessageParam] = [
                    {"role": "user", "content": f"<<fail:{kind}>> {CANARY}"}]
                try:
                    answer = client.chat.completions.create(model=model, stream=stream,
                                                            messages=messages)
                    if stream:
                        list(answer)
                except openai.APIError:
                    failed += 1
    router.stop()  # its spans are printed by the time it has stopped
    output = log.read_text(errors="replace")
    assert failed >= 2 * 2 * (len(ECHOED_FAILURES) - 1)  # the upstream did fail them
    assert output.count('"request_finished"') == 2 * 2 * len(ECHOED_FAILURES)
    assert '"kind": "SpanKind.SERVER"' in output
    assert CANARY not in output
    assert API_KEY not in output and SIM_KEY not in output
