"""Fixtures for the cache tests: real backends (a diskcache directory, a real redis-server)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cache.backends.disk import DiskResultCache
from cache.backends.redis import RedisResultCache, connect
from cache.metrics import CacheMetrics
from cache.result import ResultCache


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def metrics() -> CacheMetrics:
    return CacheMetrics()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["disk", "redis"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, metrics: CacheMetrics
) -> AsyncIterator[ResultCache]:
    """Each real backend in turn; Redis keys live under a namespace unique to the test."""
    if request.param == "disk":
        disk = DiskResultCache(tmp_path / "cache", metrics)
        yield disk
        disk.close()
        return
    url: str = request.getfixturevalue("redis_url")
    redis = RedisResultCache(connect(url), metrics, namespace=f"t-{uuid.uuid4().hex}:")
    yield redis
    await redis.aclose()
