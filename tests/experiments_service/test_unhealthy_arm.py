"""An arm whose model is down, with the default reliability settings (retries, breaker).

The `dead` arm's model answers 500 to every request. Once the circuit breaker opens, the arm's
model no longer qualifies and `decide` lets the policy as written (control's route) serve the
arm's requests. Such a request must count against the arm (else a dead arm looks healthy and is
never halted), and is not presented or measured as the arm's route: it carries
`x-slorouter-arm-degraded: <experiment>/<arm>` instead of `x-slorouter-arm`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.experiments_service.support import (
    TENANT_ENV,
    Seen,
    arm_of,
    client,
    gather_limited,
    report,
    router_yaml,
    send,
)
from tests.support.services import start_router, start_simulator

pytestmark = pytest.mark.integration

USERS = [f"dead-user-{i}" for i in range(200)]
REQUESTS, BATCH, CONCURRENCY, PAUSE_S = 400, 20, 4, 0.5  # paced over several guardrail checks
WINDOW = 150
EXPERIMENT = f"""  - name: dead
    tasks: [summarization]
    unit: user
    salt: dead-1
    arms:
      - {{name: control, route: "model:steady", control: true, share: 0.5}}
      - {{name: dead, route: "model:dead", share: 0.5}}
    guardrails:
      - {{kind: error_rate, max_rate: 0.05, min_sample: 40, window: {WINDOW}}}
"""


@dataclass
class Observed:
    seen: list[Seen]
    report: dict[str, Any]


async def _traffic(base_url: str) -> Observed:
    seen: list[Seen] = []
    async with client(base_url) as http:
        for start in range(0, REQUESTS, BATCH):
            calls = [partial(send, http, "summarization", f"dead-{i}",
                             user=USERS[i % len(USERS)]) for i in range(start, start + BATCH)]
            seen += await gather_limited(calls, CONCURRENCY)
            await asyncio.sleep(PAUSE_S)
        return Observed(seen, await report(http, "dead"))


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory: Path = tmp_path_factory.mktemp("dead")
    own_sim = start_simulator(directory, {"steady": {"ttft_p50_ms": 10, "ttft_p99_ms": 15},
                                          "dead": {"error_rate_500": 1.0}}, name="dead-sim")
    try:
        config = router_yaml(own_sim.base_url, ["steady", "dead"], ["steady"], {}, EXPERIMENT,
                             isolate_errors=False)
        router = start_router(directory, config, env=TENANT_ENV, name="dead-router")
        try:
            yield asyncio.run(_traffic(router.base_url))
        finally:
            router.stop()
    finally:
        own_sim.stop()


def test_requests_labelled_with_an_arm_are_served_by_that_arms_route(observed: Observed) -> None:
    """Every answer whose `x-slorouter-arm` is `dead/dead` came from the `dead` model; those
    control's route answered for the dead arm say so in `x-slorouter-arm-degraded`."""
    served = {s.model for s in observed.seen if s.arm == "dead" and s.status == 200}
    degraded = [s for s in observed.seen if s.degraded_arm is not None]
    print(f"\nanswers labelled `dead` served by: {served}; degraded: {len(degraded)}; dead arm: "
          f"{arm_of(observed.report, 'dead')['requests']} requests, error rate "
          f"{arm_of(observed.report, 'dead')['error_rate']}")
    assert served <= {"dead"}
    assert degraded, "the breaker never opened: nothing was served for the dead arm"
    assert all(s.degraded_arm == "dead/dead" and s.model == "steady" and s.arm is None
               for s in degraded)


def test_arm_whose_model_is_down_is_halted_by_its_error_guardrail(observed: Observed) -> None:
    """An arm that cannot answer at all breaks a 5% error guardrail and is halted (requests its
    route could not serve count as the arm's errors)."""
    halts = [h for h in observed.report["halts"] if h["persisted"]]
    assert [h["arm"] for h in halts] == ["dead"]
