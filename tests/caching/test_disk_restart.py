"""The disk result cache across restarts of a real `slorouter serve`: its answers are still
hits after a restart; a database that was corrupted while the router was down is deleted at
start-up with the answers it held (the cache starts empty), and a full disk at start-up leaves
the router uncached, instead of either stopping the router from starting."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.services import FAST_PROFILE, start_router, start_simulator

BODY = json.dumps({"model": "fast", "temperature": 0,
                   "messages": [{"role": "user", "content": "what is the capital of France?"}]})


def _config(sim_base: str, directory: Path) -> str:
    return (f"version: 1\ndeployments:\n  - {{name: d, model: openai/fast, adapter: "
            f"openai_passthrough, api_base: {sim_base}/v1, input_price_per_mtok: 1, "
            f"output_price_per_mtok: 1}}\nmodels: [{{name: fast, deployments: [d]}}]\n"
            f"routes: {{default_model: fast}}\nserver:\n  cache: {{backend: disk, directory: "
            f"{directory}, default: {{enabled: true, ttl_s: 600}}}}\n")


def _cache_statuses(base_url: str, times: int) -> list[str]:
    statuses = []
    for _ in range(times):
        request = urllib.request.Request(
            f"{base_url}/v1/chat/completions", data=BODY.encode(),
            headers={"content-type": "application/json", "x-slorouter-task": "chat",
                     "x-slorouter-risk": "low"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            statuses.append(response.headers["x-slorouter-cache"])
    return statuses


def _serve_once(tmp_path: Path, config: str, name: str, times: int) -> tuple[list[str], str]:
    """Start a router, send the request `times` times, stop it: (cache statuses, its log)."""
    router = start_router(tmp_path, config, name=name)
    try:
        return _cache_statuses(router.base_url, times), router.proc.log_text()
    finally:
        router.stop()


def test_disk_cache_hits_survive_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    with ExitStack() as started:
        sim = start_simulator(tmp_path, {"fast": FAST_PROFILE})
        started.callback(sim.stop)
        config = _config(sim.base_url, directory)
        assert _serve_once(tmp_path, config, "first", 2)[0] == ["miss", "hit"]
        assert _serve_once(tmp_path, config, "second", 1)[0] == ["hit"]


def test_a_corrupt_cache_database_is_deleted_and_the_router_starts_empty(
        tmp_path: Path) -> None:
    """Garbage in `cache.db` (and a WAL of the old database beside it) while the router is
    down: the next start logs one warning, deletes them and serves misses, then hits; it used
    to refuse to start (exit 2, `file is not a database`) until someone deleted the directory,
    so an orchestrator would restart it in a loop, and later kept them as `*.corrupt`."""
    directory = tmp_path / "cache"
    with ExitStack() as started:
        sim = start_simulator(tmp_path, {"fast": FAST_PROFILE})
        started.callback(sim.stop)
        config = _config(sim.base_url, directory)
        assert _serve_once(tmp_path, config, "first", 1)[0] == ["miss"]
        (directory / "cache.db").write_bytes(os.urandom(65536))
        (directory / "cache.db-wal").write_bytes(os.urandom(4096))
        statuses, log = _serve_once(tmp_path, config, "second", 2)
    assert statuses == ["miss", "hit"]
    warnings = [json.loads(line) for line in log.splitlines()
                if '"cache_corrupt_emptied"' in line]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning", log
    assert "Traceback" not in log
    assert not list(directory.glob("*.corrupt"))
    assert warnings[0]["files_deleted"] >= 2, warnings  # cache.db, its WAL (and -shm)


def test_a_full_disk_at_start_up_serves_uncached_instead_of_refusing_to_start(
        tmp_path: Path) -> None:
    """The cache directory on a 64 KiB filesystem that is already full (a tmpfs: needs root):
    the router starts, says so once and in `/readyz`, and answers (uncached); it used to exit 2
    with `server.cache.directory: cannot use ...: database or disk is full`."""
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (full / "filler").write_bytes(b"\0" * 60000)
        with ExitStack() as started:
            sim = start_simulator(tmp_path, {"fast": FAST_PROFILE})
            started.callback(sim.stop)
            router = start_router(tmp_path, _config(sim.base_url, full / "cache"))
            started.callback(router.stop)
            assert _cache_statuses(router.base_url, 2) == ["bypass", "bypass"]
            with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as response:
                cache = json.loads(response.read())["checks"]["cache"]
            log = router.proc.log_text()
        assert cache["ok"] and "disk full" in cache["detail"], cache
        assert sum('"cache_unavailable"' in line for line in log.splitlines()) == 1, log
    finally:
        subprocess.run(["umount", str(full)], check=False)
