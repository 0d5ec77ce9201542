"""Attempts a budget refused, as the service shows them: a hedge the hedge budget refused, and a
fallback the retry budget refused.

Served end to end (the real app over uvicorn, the real `openai` client, the hand-written
upstream of `test_attempt_cost` on a real port). With both budgets empty: after a warm-up that
gives `primary` its hedge delay, a slow answer makes a hedge due and the budget refuses it; the
primary's answer reaches the client with its `upstream_ttft` in `server-timing` (it named the
last attempt's, which was the hedge: none), the request span says `slorouter.hedge.skipped`, and
`slorouter.hedges.skipped` counts it. Then `primary` answers 503: the fallback is due, the retry
budget refuses it, the client gets the 503's own error, and `slorouter.retry_budget.refusals`
counts the refused fallback.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.faults.scenarios import TENANT_ENV, Dep, router_yaml
from tests.support.scrape import counter_values, counts_added
from tests.telemetry.helpers import in_memory_telemetry
from tests.telemetry.served import serve
from tests.telemetry.test_attempt_cost import (
    MESSAGES,
    POLICIES,
    WARM_UP,
    Upstream,
    _spans,
    _warmed_up,
)

EMPTY_BUDGETS = """    retry_budget: {share: 0.0, floor_per_s: 0.0}
    hedge_budget: {share: 0.0, floor_per_s: 0.0}"""


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    running = Upstream()
    yield running
    running.stop()


async def test_attempts_the_budgets_refuse_are_counted_and_named(upstream: Upstream) -> None:
    telemetry, exporter = in_memory_telemetry()
    deps = [Dep("d-primary", "primary"), Dep("d-alternate", "alternate")]
    config = router_yaml(upstream.base_url, deps,
                         {"primary": ["d-primary"], "alternate": ["d-alternate"]},
                         EMPTY_BUDGETS, POLICIES)
    async with serve(upstream.base_url, telemetry, whole_config=config, env=TENANT_ENV) as base:
        client = await _warmed_up(base, telemetry, exporter)
        hedges = await counter_values(base, "slorouter_hedges_skipped")
        refusals = await counter_values(base, "slorouter_retry_budget_refusals")

        upstream.answers["primary"] = (200, 0.5)  # long past the warm-up's hedge delay
        answer = await client.chat.completions.with_raw_response.create(
            model="auto", messages=MESSAGES)
        assert answer.headers["x-slorouter-model"] == "d-primary"
        assert "upstream_ttft;dur=" in answer.headers["server-timing"]
        server, attempts = await _spans(telemetry, exporter, WARM_UP + 1)
        assert (server.attributes or {})["slorouter.hedge.skipped"] == "hedge_budget_exhausted"
        assert [(s.attributes or {})["slorouter.deployment"] for s in attempts] == ["d-primary"]
        assert counts_added(hedges, await counter_values(base, "slorouter_hedges_skipped")) == {
            (("slorouter_deployment", "d-alternate"),
             ("slorouter_reason", "hedge_budget_exhausted")): 1.0}

        upstream.answers["primary"] = (503, 0.0)
        with pytest.raises(openai.InternalServerError) as failed:
            await client.chat.completions.create(model="auto", messages=MESSAGES)
        assert failed.value.status_code == 503
        assert "retry budget exhausted" in str(failed.value)
        server, attempts = await _spans(telemetry, exporter, WARM_UP + 2)
        assert (server.attributes or {})["slorouter.retry_budget.refused"] == "fallback"
        after = await counter_values(base, "slorouter_retry_budget_refusals")
        assert counts_added(refusals, after) == {
            (("slorouter_attempt_kind", "fallback"), ("slorouter_deployment", "d-alternate")): 1.0}
        await client.close()
