"""One provider simulator for the whole fault package; each test module starts its own router.

The simulator serves every model of `scenarios.FAULT_MODELS` (one model per fault, so its
per-model counters never mix scenarios). Routers differ per module because their
`server.reliability` differs (a tiny admission pool for overload, hedging policies), and their
breakers and budgets are process state that one scenario must not leave to the next.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.scenarios import FAULT_MODELS, SimCounters
from tests.support.services import Running, start_simulator


@pytest.fixture(scope="package")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("faults-sim"), FAULT_MODELS)
    yield running
    running.stop()


@pytest.fixture(scope="package")
def counters(sim: Running) -> SimCounters:
    return SimCounters(sim.base_url)
