"""Version changes make old entries unreachable at once, on both backends.

A policy change is a restart of the router with a changed config file (a new policy version)
over the same cache store: the old entries must give 0 hits. Restarting again with the old
config then hits them all, which shows the entries were still stored and only the version hid
them. A data-version change is per request: the same prompts under a new version give 0 hits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.caching.conftest import BACKENDS, Gateway
from tests.caching.service import (
    KEYS_ENV,
    Caller,
    SimStats,
    disk_cache_block,
    policies_yaml,
    redis_cache_block,
    router_yaml,
    unique_messages,
)
from tests.support.procs import ManagedProcess
from tests.support.services import Running, start_router

PROMPTS = 5
LONG_TTL_S = 600.0


def _round(base_url: str, prompts: list[list[dict[str, str]]]) -> tuple[list[str], set[str]]:
    """Send every prompt once pinned and once to `auto`; statuses and policy versions seen."""
    caller = Caller(base_url)
    try:
        seen = [caller.chat(messages, model=model) for messages in prompts
                for model in ("det", "auto")]
    finally:
        caller.close()
    assert all(s.status == 200 for s in seen)
    return [s.cache or "" for s in seen], {s.headers["x-slorouter-policy"] for s in seen}


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_change_gives_zero_hits_on_old_entries(
        backend: str, sim: Running, sim_stats: SimStats, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    """After a restart with a changed policy file no old entry hits; the old config hits all."""
    if backend == "disk":
        block = disk_cache_block(str(tmp_path / "cache"), ttl_s=LONG_TTL_S)
    else:
        server: ManagedProcess = request.getfixturevalue("redis_server")
        block = redis_cache_block(f"redis://127.0.0.1:{server.port}/0", ttl_s=LONG_TTL_S)
    prompts = [unique_messages(f"policy-{i}") for i in range(PROMPTS)]

    def run(revision: str) -> tuple[list[str], set[str]]:
        config = router_yaml(sim.base_url, block, policies_yaml(revision=revision))
        router = start_router(tmp_path, config, env=KEYS_ENV, name=f"router-{revision}")
        try:
            return _round(router.base_url, prompts)
        finally:
            router.stop()

    written, (old_version,) = run("r1")
    assert written == ["miss"] * 2 * PROMPTS
    before = sim_stats.requests()
    after_change, (new_version,) = run("r2")
    assert new_version != old_version
    assert after_change.count("hit") == 0
    assert sim_stats.requests() - before == 2 * PROMPTS
    back, (same_version,) = run("r1")
    assert same_version == old_version
    assert back == ["hit"] * 2 * PROMPTS


def test_server_settings_are_not_policy(sim: Running, sim_stats: SimStats,
                                        tmp_path: Path) -> None:
    """Routers whose configs differ only in server limits and timeouts (as replicas' may) have
    the same policy version and share their cached answers."""
    block = disk_cache_block(str(tmp_path / "cache"), ttl_s=LONG_TTL_S)
    prompts = [unique_messages(f"server-{i}") for i in range(PROMPTS)]

    def run(name: str, *edits: tuple[str, str]) -> tuple[list[str], set[str]]:
        config = router_yaml(sim.base_url, block, policies_yaml(revision="r1"))
        for old, new in edits:
            assert old in config
            config = config.replace(old, new)
        router = start_router(tmp_path, config, env=KEYS_ENV, name=name)
        try:
            return _round(router.base_url, prompts)
        finally:
            router.stop()

    written, first = run("router-a")
    assert written == ["miss"] * 2 * PROMPTS
    before = sim_stats.requests()
    shared, second = run("router-b", ("request_timeout_s: 10", "request_timeout_s: 30"),
                         ("max_body_bytes: 65536", "max_body_bytes: 32768"))
    assert second == first and shared == ["hit"] * 2 * PROMPTS
    assert sim_stats.requests() == before


def test_data_version_change_gives_zero_hits_on_old_entries(
        gateway: Gateway, sim_stats: SimStats) -> None:
    """Prompts written under data version docs-1 all miss under docs-2, and still hit under 1."""
    caller = Caller(gateway.base_url)
    prompts = [unique_messages(f"data-{i}") for i in range(PROMPTS)]
    try:
        def statuses(version: str) -> list[str | None]:
            headers = {"x-slorouter-data-version": version}
            return [caller.chat(messages, headers=headers).cache for messages in prompts]

        assert statuses("docs-1") == ["miss"] * PROMPTS
        before = sim_stats.requests()
        assert statuses("docs-2").count("hit") == 0
        assert sim_stats.requests() - before == PROMPTS
        assert statuses("docs-1") == ["hit"] * PROMPTS
    finally:
        caller.close()
