"""A pinned model's replica that keeps failing loses its traffic and wins it back once healed
(real router and simulator; `pair` is two replicas, one failing 30% of its calls with a 500, a
rate at which its breaker stays closed). Pinning skips every policy check, but the replicas are
still ordered by what the router has seen of them: those expected to meet the SLO (here the
default availability, 99.5%) first, and now and then a probe of the one left behind.

Before, prefix affinity alone chose among them: the failing replica kept half the traffic, and
its failed first attempts spent the retry budget (a CI run of the fault matrix's 30% scenario
lost one request in 400 to it)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from router.decide import EXPLORED
from router.providers.simulator.client import SimulatorControl
from tests.faults.scenarios import (
    API_KEY,
    CHAT_HEADERS,
    FAULT_MODELS,
    TENANT_ENV,
    Call,
    Dep,
    SimCounters,
    breaker_states,
    open_loop,
    router_yaml,
    run,
    varied_body,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

FLAKY, STEADY = "pinned-flaky", "pinned-steady"
RATE = 25.0
LEARNING, SETTLED = 100, 125  # requests while it learns (4 s), and after (5 s)
FLAKY_SHARE_MAX = 0.15  # of the calls once settled (measured 2-3%); affinity alone gave ~half
BATCH = 25
WON_BACK = 8  # of a batch: about a third (half once won back; probes alone ~1)
WIN_BACK_WITHIN_S = 75.0  # measured +27 s


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    deps = [Dep(FLAKY, FLAKY), Dep(STEADY, STEADY)]
    # Ten failures in a row to open a breaker, not five: at 30% (a retry on the same replica
    # included) five in a row come by chance now and then, and a CI run found the breaker
    # open after the settled phase; the test is of the ranking, which must move the traffic
    # with the breaker closed.
    config = router_yaml(sim.base_url, deps, {"pair": [FLAKY, STEADY]},
                         "    max_retries_per_deployment: 1\n"
                         "    breaker: {consecutive_failures: 10}")
    running = start_router(tmp_path_factory.mktemp("pinned-health-router"), config,
                           env=TENANT_ENV)
    yield running
    running.stop()


def test_a_failing_replica_of_a_pinned_model_loses_its_traffic_and_wins_it_back(
        gateway: Running, sim: Running, counters: SimCounters) -> None:
    learning = run(open_loop(gateway.base_url, _calls(LEARNING), RATE))
    assert all(s.ok for s in learning), [(s.status, s.error_code) for s in learning if not s.ok]
    assert counters.value(FLAKY, "errors_total") > 0, "no fault injected"
    # Which replica a request tried first is not visible to its client (a failed first attempt
    # is answered by the other); the simulator's count of calls is.
    before = counters.snapshot([FLAKY, STEADY])
    settled = run(open_loop(gateway.base_url, _calls(SETTLED), RATE, seed=11))
    after = counters.snapshot([FLAKY, STEADY])
    assert all(s.ok for s in settled), [(s.status, s.error_code) for s in settled if not s.ok]
    flaky_calls = after[FLAKY] - before[FLAKY]
    assert flaky_calls / SETTLED <= FLAKY_SHARE_MAX, (flaky_calls, after[STEADY] - before[STEADY])
    assert breaker_states(gateway.base_url)[FLAKY] == "closed"  # the ranking moved it, not it
    explained = httpx.post(f"{gateway.base_url}/v1/route/explain", json=varied_body("pair"),
                           headers={"authorization": f"Bearer {API_KEY}", **CHAT_HEADERS},
                           timeout=10).json()["choice"]
    replicas = {r["deployment"]: r for r in explained["replicas"]}
    assert {name: r["meets_slo"] for name, r in replicas.items()} == {
        FLAKY: False, STEADY: True}, explained
    probed = replicas[FLAKY]["detail"].startswith(EXPLORED)  # a probe (3%) goes first
    assert explained["deployments"] == ([FLAKY, STEADY] if probed else [STEADY, FLAKY])

    control = SimulatorControl(sim.base_url)
    control.set_profile(FLAKY, {"error_rate_500": 0.0})
    try:
        healed_at, shares = time.monotonic(), list[int]()
        while time.monotonic() - healed_at < WIN_BACK_WITHIN_S:
            batch = run(open_loop(gateway.base_url, _calls(BATCH), RATE, seed=len(shares)))
            assert all(s.ok for s in batch)
            shares.append(sum(s.deployment == FLAKY for s in batch))
            if shares[-1] >= WON_BACK:
                break
        assert shares[-1] >= WON_BACK, f"the healed replica's answers per {BATCH}: {shares}"
    finally:
        control.set_profile(FLAKY, {"error_rate_500": FAULT_MODELS[FLAKY]["error_rate_500"]})


def _calls(count: int) -> list[Call]:
    return [Call(varied_body("pair")) for _ in range(count)]
