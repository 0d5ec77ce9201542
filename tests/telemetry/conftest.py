"""A provider simulator process shared by the telemetry tests that serve real requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.services import Running, start_simulator

FAST = {"ttft_p50_ms": 5, "ttft_p99_ms": 10, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20, "tokens_per_chunk": 2}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("sim"),
                              {"fast": FAST, "broken": {**FAST, "error_rate_500": 1.0}})
    yield running
    running.stop()
