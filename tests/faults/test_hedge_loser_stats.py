"""A hedge that loses its race tells the statistics nothing about its deployment's speed.

One router: `chat` goes to `bimodal` (TTFT 50 ms, 20% of answers at ~300 ms) with hedging on
and `slowpoke` (a steady 400 ms) as the alternate; `code` may use either, `min_latency`, and
is only explained, never sent. The hedge delay is 3x `bimodal`'s median (150 ms: its p88 lies
in the slow mode, so the cap applies), and `bimodal`'s slow answers (~300 ms) always come back
before a hedge to `slowpoke` (150 + 400 ms) could: every hedge loses, cut ~150 ms after it was
sent. That age is no bound on `slowpoke`'s TTFT, only on how long the primary kept it waiting.
It used to be recorded as a first token all the same, so the router believed the 400 ms
deployment answered in ~150 ms, faster than `bimodal`, and ranked it first for `code`.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import (
    API_KEY,
    TENANT_ENV,
    Call,
    Dep,
    SimCounters,
    chat_body,
    closed_loop,
    router_yaml,
    run,
)
from tests.support.services import Running, start_router

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POLICIES = """policies:
  default:
    candidates: [bimodal]
    fallbacks: [slowpoke]
    hedging: true
  tasks:
    code:
      candidates: [bimodal, slowpoke]
      objective: min_latency
"""
REQUESTS = 400
SLOWPOKE_TTFT_S = 0.4


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    deps = [Dep("bimodal", "bimodal"), Dep("slowpoke", "slowpoke")]
    config = router_yaml(sim.base_url, deps, {"bimodal": ["bimodal"], "slowpoke": ["slowpoke"]},
                         "    {}", POLICIES)
    running = start_router(tmp_path_factory.mktemp("hedge-loser-router"), config,
                           env=TENANT_ENV)
    yield running
    running.stop()


def _code_scores(gateway: Running) -> dict[str, float]:
    """`min_latency` scores for `code` (minus the predicted TTFT p95 over availability)."""
    reply = httpx.post(f"{gateway.base_url}/v1/route/explain", timeout=10,
                       headers={"authorization": f"Bearer {API_KEY}",
                                "x-slorouter-task": "code"},
                       json=chat_body("auto"))
    assert reply.status_code == 200, reply.text
    return {c["deployment"]: c["score"] for c in reply.json()["candidates"]}


def test_a_lost_hedge_does_not_make_its_deployment_look_fast(
        gateway: Running, counters: SimCounters) -> None:
    """After hundreds of hedged `chat` requests in which `slowpoke` never answered first, the
    router does not predict it faster than it is, nor rank it before `bimodal` for `code`."""
    before = counters.value("slowpoke")
    shots = run(closed_loop(gateway.base_url,
                            [Call(chat_body("auto"), {"x-slorouter-task": "chat"})] * REQUESTS,
                            8))
    assert all(s.ok for s in shots), [s for s in shots if not s.ok][:3]
    hedges = counters.value("slowpoke") - before
    won_by_slowpoke = sum(1 for s in shots if s.deployment == "slowpoke")
    assert hedges >= 10, "too few hedges to say anything"  # ~14% of 400 by the hedge budget
    assert won_by_slowpoke <= hedges // 5, (won_by_slowpoke, hedges)  # nearly all lost
    scores = _code_scores(gateway)
    predicted_p95 = -scores["slowpoke"]
    assert predicted_p95 >= 0.8 * SLOWPOKE_TTFT_S, (scores, hedges, won_by_slowpoke)
    assert scores["bimodal"] > scores["slowpoke"], scores
