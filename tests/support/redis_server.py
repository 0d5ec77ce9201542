"""A real `redis-server` for tests: started on a free port in a temporary directory.

`.ci/run` installs redis-server when it is missing, so these tests never skip in CI. Locally,
`apt-get install -y redis-server` provides it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.procs import ManagedProcess, free_port


def start_redis(directory: Path, options: Sequence[str] = ()) -> ManagedProcess:
    """Start redis-server with no persistence on a free loopback port, with extra `options`
    (e.g. `("--requirepass", "pw")`)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found: run `apt-get install -y redis-server`")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(directory), *options]
    return ManagedProcess(argv, port, log_path=directory / "redis.log").start()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One redis-server for the session; tests use distinct key prefixes or flush it."""
    proc = start_redis(tmp_path_factory.mktemp("redis"))
    yield proc
    proc.stop()


@pytest.fixture
def redis_url(redis_server: ManagedProcess) -> str:
    return f"redis://127.0.0.1:{redis_server.port}/0"
