"""A hedge runs under its own timeout, not its primary's.

The primary's deployment has a short `timeout_s` (1.5 s), its alternate a long one. When the
primary hangs, the hedge sent to the alternate is the request's answer: the race went on only
while the primary's timeout ran, so a hedge answering at 2 s was cut at 1.5 s (recorded as the
alternate's failure, its call billed), and the alternate was called again from scratch as the
fallback, answering at 3.5 s (the reliability audit of 2026-12-07).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import API_KEY, TENANT_ENV, Dep, SimCounters, router_yaml, steady
from tests.support.services import Running, finished_requests, gateway_and_simulator

pytestmark = pytest.mark.integration

PRIMARY_TIMEOUT_S = 1.5
ALTERNATE_TTFT_MS = 2000
MODELS = {"calm": steady(100), "mid": steady(100)}
POLICIES = """policies:
  default:
    candidates: [primary]
    fallbacks: [alternate]
    hedging: true
"""
HEADERS = {"x-slorouter-task": "chat"}
WARM_UP = 40  # answers on the primary before a hedge delay is learnt


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    deps = [Dep("primary", "calm", timeout_s=PRIMARY_TIMEOUT_S), Dep("alternate", "mid")]
    config = router_yaml("{sim}", deps, {"primary": ["primary"], "alternate": ["alternate"]},
                         reliability="    {}", policies=POLICIES)
    with gateway_and_simulator(tmp_path_factory.mktemp("hedge-timeout"), MODELS,
                               lambda sim: config.replace("{sim}", sim), TENANT_ENV,
                               extra_args=("--access-log",)) as started:
        yield started


def _ask(http: httpx.Client) -> tuple[httpx.Response, float]:
    nonce = uuid.uuid4().hex[:12]
    started = time.monotonic()
    question = {"role": "user", "content": f"Name three rivers ({nonce})."}
    response = http.post("/v1/chat/completions", headers=HEADERS,
                         json={"model": "auto", "messages": [question]})
    return response, time.monotonic() - started


def test_a_hedge_answers_after_its_primarys_timeout(stack: tuple[Running, Running]) -> None:
    router, sim = stack
    counters = SimCounters(sim.base_url)
    with httpx.Client(base_url=router.base_url, timeout=30,
                      headers={"authorization": f"Bearer {API_KEY}"}) as http:
        for _ in range(WARM_UP):
            assert _ask(http)[0].status_code == 200
        httpx.post(f"{sim.base_url}/control/models/calm", json={"hang_rate": 1.0}, timeout=10)
        httpx.post(f"{sim.base_url}/control/models/mid", timeout=10,
                   json={"ttft_p50_ms": ALTERNATE_TTFT_MS, "ttft_p99_ms": ALTERNATE_TTFT_MS})
        before = counters.snapshot(["calm", "mid"])
        response, elapsed = _ask(http)
        after = counters.snapshot(["calm", "mid"])
    assert response.status_code == 200, response.text
    assert response.headers["x-slorouter-model"] == "alternate"
    assert after["mid"] - before["mid"] == 1  # the hedge only, never sent again as a fallback
    assert after["calm"] - before["calm"] == 1
    # the hedge's 2 s and its delay; cut and sent again, it answered after 1.5 s + 2 s
    assert elapsed < PRIMARY_TIMEOUT_S + ALTERNATE_TTFT_MS / 1000, elapsed
    # the primary's cut is named as an attempt's not raced (its adapter's timeout said
    # `upstream_read_timeout`: the re-audit)
    attempts = finished_requests(router.proc.log_path)[-1]["attempts"]
    primary = [a for a in attempts if a["deployment"] == "primary"]
    assert [a.get("code") for a in primary] == ["first_token_timeout"], attempts
