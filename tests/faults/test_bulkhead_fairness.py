"""A deployment's `max_in_flight` is shared fairly: a tenant's flood does not take every place.

One deployment capped at 4 attempts in flight, answering in 400 ms (at most 10 requests a
second). Tenant `quiet` sends one request (the deployment idle), then tenant `flood` sends 20
a second for 6 s, twice what the deployment serves, while `quiet` sends 2 a second. First come,
first served, the flood took each place as it freed and `quiet`'s requests were refused
`deployment_saturated` (the overload audit of 2026-12-07: quiet tenants served 4-11% during a
flood); now the last place is kept for a tenant under its equal share (`bulkhead.admits`), so
every one of `quiet`'s requests is served while the flood's excess is refused.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.faults.scenarios import (
    API_KEY,
    Dep,
    TenantLoad,
    interactive_pool,
    router_yaml,
    start_with_second_tenant,
    tenants_load,
)
from tests.support.services import Running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUIET_KEY = "sk-faults-quiet-bulkhead"
CAP = 4
SECONDS = 6.0
FLOOD_RATE, QUIET_RATE = 20.0, 2.0


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    config = router_yaml(sim.base_url, [Dep("narrow", "capacity", max_in_flight=CAP)],
                         {"narrow": ["narrow"]}, interactive_pool(64, 0, 1.0))
    running = start_with_second_tenant(tmp_path_factory.mktemp("bulkhead-fairness"), config,
                                       "quiet", QUIET_KEY)
    yield running
    running.stop()


def _load(base_url: str) -> dict[str, Counter[str]]:
    # `quiet` asks once, the deployment idle, then both at once
    first = asyncio.run(tenants_load(base_url, [TenantLoad("quiet", QUIET_KEY, "narrow", 1, 1)]))
    results = asyncio.run(tenants_load(base_url, [
        TenantLoad("flood", API_KEY, "narrow", FLOOD_RATE, SECONDS),
        TenantLoad("quiet", QUIET_KEY, "narrow", QUIET_RATE, SECONDS)]))
    results["quiet"].update(first["quiet"])
    return results


def test_a_flooding_tenant_leaves_a_place_to_the_others(gateway: Running) -> None:
    results = _load(gateway.base_url)
    quiet, flood = results["quiet"], results["flood"]
    assert quiet == Counter(ok=QUIET_RATE * SECONDS + 1), results
    # the flood was served what the rest of the cap serves, and refused the rest at once
    assert flood["ok"] > 0 and flood["503 deployment_saturated"] > 0, results
    assert sum(flood.values()) == FLOOD_RATE * SECONDS, results
