"""A provider simulator process shared by the telemetry tests that serve real requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.services import Running, start_fast_and_broken


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_fast_and_broken(tmp_path_factory.mktemp("sim"))
    yield running
    running.stop()
