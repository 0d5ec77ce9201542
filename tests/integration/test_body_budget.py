"""Request bodies in flight are bounded in bytes (`server.max_body_bytes_in_flight`).

Bodies are read before admission (a slow upload holds no slot), so the admission limits never
bounded them: 40 concurrent 3.5 MB uploads raised a router's RSS by 270 MB, 38 of them refused
by admission only once parsed, and the process kept the peak (the memory audit). Here the budget
holds one 600 KB body and not two: while the first request waits on its slow model, a second
is refused 503 `bodies_over_budget` before its body is parsed; once the first has its answer,
the budget is free again. A body still arriving holds nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.services import Running, simulated_gateway

pytestmark = pytest.mark.integration

BODY_TEXT = "route this " * 55_000  # about 600 KB


def _config(sim_base: str) -> str:
    return f"""version: 1
deployments:
  - {{name: slow, model: openai/slow, adapter: openai_passthrough, api_base: '{sim_base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: slow, deployments: [slow]}}]
routes: {{default_model: slow}}
server:
  cache: {{backend: none}}
  max_body_bytes: 1000000
  max_body_bytes_in_flight: 1000000
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    slow = {"ttft_p50_ms": 3000, "ttft_p99_ms": 3000, "output_tokens_p50": 2,
            "output_tokens_p99": 2}
    with simulated_gateway(tmp_path_factory.mktemp("body-budget"), {"slow": slow}, _config,
                           env={}) as router:
        yield router


def _ask(base_url: str) -> httpx.Response:
    body: dict[str, Any] = {"model": "slow", "max_tokens": 2,
                            "messages": [{"role": "user", "content": BODY_TEXT}]}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30)


def test_a_body_past_the_budget_is_refused_before_it_is_parsed(gateway: Running) -> None:
    """Two such requests a second apart, each held 3 s upstream: whichever body arrived second
    is refused (under the suite's load the second sent is not always the second read)."""
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(_ask(gateway.base_url)))
    first.start()
    time.sleep(1.0)
    answers.append(_ask(gateway.base_url))
    first.join(timeout=30)
    assert sorted(a.status_code for a in answers) == [200, 503], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 503)
    error = refused.json()["error"]
    assert error["code"] == "bodies_over_budget" and refused.headers.get("retry-after") == "1"
    assert _ask(gateway.base_url).status_code == 200  # released with its request


def test_connections_that_send_no_body_hold_nothing(gateway: Running) -> None:
    """Counted at its declared size from the start, a body that never came held the budget
    until its read timed out: three connections sending headers alone refused everyone else's
    requests (the re-audit). A body is counted once it has arrived."""
    import socket

    idle = []
    for _ in range(3):
        conn = socket.create_connection(("127.0.0.1", int(gateway.base_url.rsplit(":", 1)[1])))
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                     b"content-type: application/json\r\ncontent-length: 900000\r\n\r\n")
        idle.append(conn)
    try:
        assert _ask(gateway.base_url).status_code == 200
    finally:
        for conn in idle:
            conn.close()


def test_an_explanation_s_body_counts_against_the_same_budget(gateway: Running) -> None:
    """`/v1/route/explain` read its body beside the budget: 24 explanations of 3.9 MB each were
    all answered against an 8 MB budget, where chat refused 21 of 24 (the security audit). While
    a chat request holds the budget, an explanation's body is refused too; alone it is answered,
    and it gives its share back."""
    body: dict[str, Any] = {"model": "slow", "messages": [{"role": "user", "content": BODY_TEXT}]}
    explain = f"{gateway.base_url}/v1/route/explain"
    holder = threading.Thread(target=lambda: _ask(gateway.base_url))
    holder.start()
    time.sleep(1.0)
    refused = httpx.post(explain, json=body, timeout=30)
    holder.join(timeout=30)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "bodies_over_budget"
    assert httpx.post(explain, json=body, timeout=30).status_code == 200
    assert _ask(gateway.base_url).status_code == 200  # the explanation's share was given back
