"""Fixtures for the latency-feedback acceptance tests: a simulator and router per module.

Each module starts its own simulator (its per-model counters and profile changes never leak
into another scenario) and its own router (its decayed statistics and SLO windows are process
state). `services(...)` starts both and stops them at module teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.feedback.scenarios import TENANT_ENV
from tests.support.services import Running, start_router, start_simulator

StartSim = Callable[[dict[str, dict[str, object]]], Running]
StartRouter = Callable[[str, str], Running]


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="module")
def stack(module_dir: Path) -> Iterator[ExitStack]:
    """Processes started through `start_sim`/`start_router` are stopped when the module ends."""
    with ExitStack() as exits:
        yield exits


@pytest.fixture(scope="module")
def start_sim(module_dir: Path, stack: ExitStack) -> StartSim:
    def start(models: dict[str, dict[str, object]]) -> Running:
        running = start_simulator(module_dir, models)
        stack.callback(running.stop)
        return running

    return start


@pytest.fixture(scope="module")
def start_gateway(module_dir: Path, stack: ExitStack) -> StartRouter:
    def start(name: str, config_yaml: str) -> Running:
        running = start_router(module_dir, config_yaml, env=TENANT_ENV, name=name)
        stack.callback(running.stop)
        return running

    return start
