"""One simulator and one router for the package, with four experiments on four tasks.

The experiments never share traffic: `Assigner` takes the first running experiment for a task,
so each lives on its own task and the tests pick it with the `x-slorouter-task` hint.

- `ttft` (task chat, unit request, 50/50): control `policy:default` (the chat policy: `base`,
  TTFT median 120 ms) against `fast` (`model:fast`, median 96 ms: 20% lower). Declares the
  feedback metrics `thumbs_up` (binary) and `rating` (continuous, 1 to 5).
- `errors` (task summarization, unit user, 50/50): `model:steady` against `model:flaky`, with
  an error-rate guardrail (5%, window `ERROR_WINDOW`).
- `quality` (task extraction, unit user, 50/50): `model:steady` against `model:meh`, with a
  quality floor of 0.7 on `thumbs_up` (window `QUALITY_WINDOW`).
- `idle` (task math): never sent traffic, for reports of an empty experiment.

The stickiness module starts its own routers (Redis-shared) against the same simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.experiments_service.support import TENANT_ENV, profile, router_yaml
from tests.support.services import Running, start_router, start_simulator

BASE_TTFT_MS = 120.0
FAST_RATIO = 0.8  # the treatment arm's TTFT median relative to control's
TTFT_SPREAD = 3.0  # p99 / p50: log sd 0.47, like the simulator's wider fitted profiles
ERROR_WINDOW, ERROR_MIN_SAMPLE, ERROR_MAX_RATE = 150, 40, 0.05
QUALITY_WINDOW, QUALITY_MIN_SAMPLE, QUALITY_FLOOR = 150, 40, 0.7

SIM_MODELS: dict[str, dict[str, object]] = {
    "base": profile(BASE_TTFT_MS, ttft_spread=TTFT_SPREAD),
    "fast": profile(BASE_TTFT_MS * FAST_RATIO, ttft_spread=TTFT_SPREAD),
    "steady": profile(10.0),
    "flaky": profile(10.0),
    "meh": profile(10.0),
    "instant-a": profile(2.0),
    "instant-b": profile(2.0),
    "instant-c": profile(2.0),
}

EXPERIMENTS_YAML = f"""  - name: ttft
    tasks: [chat]
    unit: request
    salt: acceptance-1
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: fast, route: "model:fast", share: 0.5}}
    metrics:
      - {{name: thumbs_up, kind: binary}}
      - {{name: rating, kind: continuous, range: [1, 5]}}
    sequential: {{alpha: 0.05, min_sample: 100, primary_metric: ttft_ms, mixture_sd: 0.2}}
  - name: errors
    tasks: [summarization]
    unit: user
    salt: acceptance-1
    arms:
      - {{name: control, route: "model:steady", control: true, share: 0.5}}
      - {{name: flaky, route: "model:flaky", share: 0.5}}
    guardrails:
      - {{kind: error_rate, max_rate: {ERROR_MAX_RATE}, min_sample: {ERROR_MIN_SAMPLE},
         window: {ERROR_WINDOW}}}
  - name: quality
    tasks: [extraction]
    unit: user
    salt: acceptance-1
    arms:
      - {{name: control, route: "model:steady", control: true, share: 0.5}}
      - {{name: meh, route: "model:meh", share: 0.5}}
    metrics:
      - {{name: thumbs_up, kind: binary}}
    guardrails:
      - {{kind: quality_floor, metric: thumbs_up, floor: {QUALITY_FLOOR},
         min_sample: {QUALITY_MIN_SAMPLE}, window: {QUALITY_WINDOW}}}
  - name: idle
    tasks: [math]
    unit: user
    salt: acceptance-1
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: other, route: "model:instant-a", share: 0.5}}
"""


@pytest.fixture(scope="package")
def package_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("experiments_service")


@pytest.fixture(scope="package")
def sim(package_dir: Path) -> Iterator[Running]:
    running = start_simulator(package_dir, SIM_MODELS)
    yield running
    running.stop()


@pytest.fixture(scope="package")
def gateway(sim: Running, package_dir: Path) -> Iterator[Running]:
    config = router_yaml(sim.base_url, list(SIM_MODELS), ["steady"], {"chat": ["base"]},
                         EXPERIMENTS_YAML)
    running = start_router(package_dir, config, env=TENANT_ENV, name="gateway")
    yield running
    running.stop()
