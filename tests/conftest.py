"""Shared fixtures: the real-process harness lives in tests/support."""

from collections.abc import Iterator

import pytest

from tests.support.machine_share import machine_share

pytest_plugins = ["tests.support.redis_server"]


@pytest.fixture(autouse=True)
def _share_the_machine(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test shares the machine with the other xdist workers' tests; one marked
    `exclusive` has it to itself (tests/support/machine_share.py)."""
    whole = request.node.get_closest_marker("exclusive") is not None
    with machine_share(tmp_path_factory, whole):
        yield
