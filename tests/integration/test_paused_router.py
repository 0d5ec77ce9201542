"""A router process stopped for longer than an attempt's timeout keeps the answer that came in
time, and does not blame the deployment for its own pause.

The pause audit of 2026-12-06 stopped a router (SIGSTOP, as a frozen container or a migrated VM
is) for 25 s while it waited on an upstream that answered after 8 s: each client got a 504
`first_token_timeout` for an answer the router held, and the deployment's breaker opened.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.services import Running, simulated_gateway

pytestmark = pytest.mark.integration


def _config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: slow, model: openai/slow, adapter: openai_passthrough, api_base: '{sim_base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 3}}
models: [{{name: slow, deployments: [slow]}}]
routes: {{default_model: slow}}
server:
  cache: {{backend: none}}
  reliability: {{max_retries_per_deployment: 0}}  # a retry after the pause would hide the cut
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    slow = {"ttft_p50_ms": 1000, "ttft_p99_ms": 1000, "output_tokens_p50": 4,
            "output_tokens_p99": 4}
    with simulated_gateway(tmp_path_factory.mktemp("paused"), {"slow": slow}, _config,
                           env={}) as router:
        yield router


def _ask(base_url: str, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/chat/completions", timeout=30,
                      json={"model": "slow", "max_tokens": 4, "stream": stream,
                            "messages": [{"role": "user", "content": "hello"}]})


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_answer_that_came_during_a_pause_is_delivered(gateway: Running, stream: bool) -> None:
    answers: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: answers.append(_ask(gateway.base_url, stream)))
    asking.start()
    time.sleep(0.3)  # the request waits on its upstream (1 s to its first token)
    os.kill(gateway.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(4.0)  # past the attempt's 3 s timeout; the upstream answered meanwhile
    finally:
        os.kill(gateway.proc.pid, signal.SIGCONT)
    asking.join(timeout=30)
    assert len(answers) == 1 and answers[0].status_code == 200, answers[0].text
    if stream:
        assert "[DONE]" in answers[0].text and '"error"' not in answers[0].text
    after = _ask(gateway.base_url)  # the breaker was not opened by the pause
    assert after.status_code == 200, after.text
