"""A stream of `n` choices is timed per token by its longest choice.

The simulator decodes every step at 20 ms, its `n` choices side by side and of unequal length.
The span from a stream's first token to its last is the longest choice's, so its TPOT is that
span over the longest choice's tokens: 20 ms. Over the mean choice's, it read 40 ms at the
median (up to 68), and 30 of 40 such answers missed a 30 ms TPOT target the deployment met
(the feedback audit of 2026-12-07). Served end to end: the router as a process with its
access log, the real `openai` client.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator

import openai
import pytest

from tests.faults.scenarios import API_KEY, TENANT_ENV, Dep, router_yaml
from tests.support.services import Running, gateway_and_simulator

pytestmark = pytest.mark.integration

STEADY_20MS = {"ttft_p50_ms": 50, "ttft_p99_ms": 50, "tpot_p50_ms": 20, "tpot_p99_ms": 20,
               "output_tokens_p50": 30, "output_tokens_p99": 120, "output_tokens_max": 150,
               "tokens_per_chunk": 1}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, str]]:
    directory = tmp_path_factory.mktemp("n-choices-tpot")
    config = router_yaml("{sim}", [Dep("a", "m")], {"m": ["a"]},
                         reliability="    max_retries_per_deployment: 0")
    with gateway_and_simulator(directory, {"m": STEADY_20MS},
                               lambda sim: config.replace("{sim}", sim), TENANT_ENV,
                               extra_args=("--access-log",)) as (running, _sim):
        yield running, str(directory / "router.log")


def _tpots_ms(log: str) -> list[float]:
    with open(log, encoding="utf-8") as lines:
        finished = [json.loads(line) for line in lines if '"request_finished"' in line]
    return [entry["tpot_s"] * 1e3 for entry in finished if entry.get("tpot_s")]


def test_tpot_of_n_choices_is_the_longest_choices_pace(router: tuple[Running, str]) -> None:
    running, log = router
    client = openai.OpenAI(base_url=f"{running.base_url}/v1", api_key=API_KEY, max_retries=0)
    for i in range(12):
        stream = client.chat.completions.create(
            model="m", n=4, max_tokens=150, stream=True,
            messages=[{"role": "user", "content": f"Tell a short story, number {i}."}])
        assert {c.choices[0].index for c in stream if c.choices} == {0, 1, 2, 3}
    client.close()
    tpots = _tpots_ms(log)
    assert len(tpots) >= 10, tpots
    assert 15.0 <= statistics.median(tpots) <= 28.0, sorted(tpots)
