"""A tenant whose prompts fail everywhere does not spend the others' retries.

The retry budget is the process's (20% of requests plus 1 a second, over 10 s). Tenant `flood`
sends 20 requests a second to a model whose two deployments answer every request with a 500
(prompts that fail on every deployment; breakers that never open here, as the breakers'
attribution keeps such prompts from opening them): each wants a fallback and retries, far more
than the budget earns. Tenant `quiet` sends 5 a second to a model whose first deployment
answers 30% of them with a 503 and whose second is healthy: each such request needs one
fallback. With one budget for all, `flood` took every token as it was earned and about a
quarter of `quiet`'s 503s went unretried (the overload audit of 2026-12-07: 93.5-96% served);
shared fairly, `quiet`, which asks for less than an equal share, is granted whenever a token is
left, and `flood` leaves it room (`router/execution/retry_budget.py`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import (
    API_KEY,
    Dep,
    TenantLoad,
    router_yaml,
    start_with_second_tenant,
    tenants_load,
)
from tests.support.services import Running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUIET_KEY = "sk-faults-quiet-tenant"
SECONDS = 8.0
FLOOD_RATE = 40.0
QUIET_RATE = 5.0
# `quiet` starts first: its first 503 then finds the budget as yet untouched (a tenant's first
# ask for a token, when another has taken them all, is refused: only then is it known to ask)
WARM_S = 2.0
RELIABILITY = """    breaker: {consecutive_failures: 1000000, min_volume: 1000000}
    max_retries_per_deployment: 1"""


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    deps = [Dep("poison-a", "poison-a"), Dep("poison-b", "poison-b"), Dep("blip", "blip"),
            Dep("blip-backup", "blip-backup")]
    config = router_yaml(sim.base_url, deps, {"flooded": ["poison-a", "poison-b"],
                                              "blipping": ["blip", "blip-backup"]},
                         RELIABILITY)
    running = start_with_second_tenant(tmp_path_factory.mktemp("budget-fairness"), config,
                                       "quiet", QUIET_KEY)
    yield running
    running.stop()


def test_a_tenant_failing_everywhere_leaves_the_others_their_retries(gateway: Running) -> None:
    results = asyncio.run(tenants_load(gateway.base_url, [
        TenantLoad("flood", API_KEY, "flooded", FLOOD_RATE, SECONDS, after_s=WARM_S),
        TenantLoad("quiet", QUIET_KEY, "blipping", QUIET_RATE, WARM_S + SECONDS)]))
    quiet, flood = results["quiet"], results["flood"]
    assert sum(quiet.values()) == QUIET_RATE * (WARM_S + SECONDS), results
    assert sum(flood.values()) == FLOOD_RATE * SECONDS, results
    assert flood["ok"] == 0, results  # nothing serves it: its retries were spent for nothing
    assert quiet == Counter(ok=QUIET_RATE * (WARM_S + SECONDS)), results  # every one served
    # and the budget did refuse: the flooding tenant's fallbacks and retries
    refused = [line for line in httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
               .splitlines() if line.startswith("slorouter_retry_budget_refusals_total")]
    assert refused and all("poison" in line for line in refused), refused
