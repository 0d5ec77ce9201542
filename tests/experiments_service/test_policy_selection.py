"""An arm the policy bars for some requests: the report counts them and flags the arm.

The `window` experiment sends half its requests to `model:instant-b`, whose deployment has a
context window of 300 tokens; control is the policy as written (`instant-a`, no window). Long
prompts (about 1,000 tokens) cannot go to `instant-b`: control's route answers them for the
arm (`x-slorouter-arm-degraded`) and they are no outcome of the arm. The arm's figures are
then those of the short prompts only while control keeps both, so the report must say how many
of the arm's requests were barred and flag the arm (it said nothing: an audit saw a 3x-priced
arm read 80% cheaper, the SRM check at p = 0.48). Real processes: the package's simulator and a
router of its own, the `openai` client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from router.experiments.report import ExperimentReport, render_table
from tests.experiments_service.support import (
    API_KEY,
    TENANT_ENV,
    client,
    report,
    router_yaml,
    wait_for_counts,
)
from tests.support.services import Running, start_router

pytestmark = pytest.mark.integration

EXPERIMENT = """  - name: window
    tasks: [classification]
    unit: request
    salt: window-1
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: small, route: "model:instant-b", share: 0.5}"""
SHORT, LONG = 30, 30
LONG_PROMPT = "classify this report as urgent or routine: " + "the pump pressure held. " * 200


@pytest.fixture(scope="module")
def router(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yaml = router_yaml(sim.base_url, ["instant-a", "instant-b"], ["instant-a"], {}, EXPERIMENT)
    small = "    model: openai/instant-b\n"
    assert small in yaml
    yaml = yaml.replace(small, small + "    context_window: 300\n")
    running = start_router(tmp_path_factory.mktemp("policy-selection"), yaml, env=TENANT_ENV)
    yield running
    running.stop()


async def test_requests_the_policy_bars_from_an_arm_are_counted_and_flag_it(
        router: Running) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0)
    served: dict[str, int] = {"control": 0, "small": 0}
    barred = 0
    try:
        for i in range(SHORT + LONG):
            text = LONG_PROMPT if i % 2 else f"classify: river or mountain? ({i})"
            raw = await sdk.chat.completions.with_raw_response.create(
                model="auto", max_tokens=8, messages=[{"role": "user", "content": text}],
                extra_headers={"x-slorouter-task": "classification"})
            degraded = raw.headers.get("x-slorouter-arm-degraded")
            if degraded is not None:
                assert degraded == "window/small" and i % 2, (i, degraded)
                barred += 1
            else:
                served[raw.headers["x-slorouter-arm"].partition("/")[2]] += 1
    finally:
        await sdk.close()
    assert barred >= 5 and served["small"] >= 5 and served["control"] >= 5, (barred, served)

    async with client(router.base_url) as http:
        rep = await wait_for_counts(http, "window", served)
        for _ in range(50):  # the barred counts are written in the background too
            if rep["selection"]["barred"].get("small") == barred:
                break
            await asyncio.sleep(0.1)
            rep = await report(http, "window")
    selection = rep["selection"]
    assert selection["barred"] == {"control": 0, "small": barred}
    assert selection["shares"]["small"] == pytest.approx(barred / (barred + served["small"]))
    assert selection["flagged"] == ["small"]
    table = render_table(ExperimentReport.model_validate(rep))
    assert f"small {barred} (" in table and "compared on the rest" in table
