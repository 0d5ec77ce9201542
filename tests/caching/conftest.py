"""One simulator for the package, and one router per cache backend (diskcache, real Redis).

`gateway` is parametrized over the two backends at package scope, so each backend's router
starts once and every test that takes it runs against both. Tests that restart or break
something (policy change, Redis killed) start their own routers with `start_router`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.caching.service import (
    KEYS_ENV,
    SIM_MODELS,
    Caller,
    SimStats,
    disk_cache_block,
    policies_yaml,
    redis_cache_block,
    router_yaml,
)
from tests.support.procs import ManagedProcess
from tests.support.services import Running, start_router, start_simulator

BACKENDS = ["disk", "redis"]


@dataclass
class Gateway:
    backend: str
    router: Running
    sim_base: str

    @property
    def base_url(self) -> str:
        return self.router.base_url


@pytest.fixture(scope="package")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("cache-sim"), SIM_MODELS)
    yield running
    running.stop()


@pytest.fixture(scope="package")
def sim_stats(sim: Running) -> SimStats:
    return SimStats(sim.base_url)


@pytest.fixture(scope="package", params=BACKENDS)
def gateway(request: pytest.FixtureRequest, sim: Running,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The router with policies (per-task cache rules) over one backend."""
    directory = tmp_path_factory.mktemp(f"cache-router-{request.param}")
    if request.param == "disk":
        block = disk_cache_block(str(directory / "cache"))
    else:
        server: ManagedProcess = request.getfixturevalue("redis_server")
        block = redis_cache_block(f"redis://127.0.0.1:{server.port}/0")
    running = start_router(directory, router_yaml(sim.base_url, block, policies_yaml()),
                           env=KEYS_ENV)
    yield Gateway(request.param, running, sim.base_url)
    running.stop()


@pytest.fixture
def caller(gateway: Gateway) -> Iterator[Caller]:
    calling = Caller(gateway.base_url)
    yield calling
    calling.close()
