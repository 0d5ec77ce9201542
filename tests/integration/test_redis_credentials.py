"""Redis refusing the credentials a URL gives (wrong or missing password, unknown ACL user) is
a configuration error, not an outage: `serve` exits 2 naming the setting, and `/readyz` names
it when the refusal comes later (a password rotated under a running service). Against a real
redis-server started with `requirepass`; no message repeats a password."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from router.readiness_redis import LOOK_EVERY_S
from tests.support.procs import PYTHON, ManagedProcess, free_port
from tests.support.redis_server import start_redis
from tests.support.services import MINIMAL_CONFIG, start_router

pytestmark = pytest.mark.integration

PASSWORD = "right-horse-battery"
WRONG = "wrong-staple-guess"


@pytest.fixture
def guarded_redis(tmp_path: Path) -> Iterator[ManagedProcess]:
    proc = start_redis(tmp_path, ("--requirepass", PASSWORD))
    yield proc
    proc.stop()


@pytest.mark.parametrize(("yaml", "setting"), [
    ("server:\n  idempotency_redis_url: 'redis://:{wrong}@127.0.0.1:{port}/0'\n",
     "server.idempotency_redis_url"),
    ("server:\n  cache: {{backend: redis, redis_url: 'redis://127.0.0.1:{port}/0'}}\n",
     "server.cache.redis_url"),
    ("server:\n  stats: {{redis_url: 'redis://nobody:{wrong}@127.0.0.1:{port}/0'}}\n",
     "server.stats.redis_url"),
])
def test_serve_refuses_to_start_on_credentials_redis_refuses(
        tmp_path: Path, guarded_redis: ManagedProcess, yaml: str, setting: str) -> None:
    """A wrong password (WRONGPASS), none (NOAUTH) and an unknown ACL user (WRONGPASS)."""
    config = tmp_path / "config.yaml"
    config.write_text(MINIMAL_CONFIG + yaml.format(wrong=WRONG, port=guarded_redis.port))
    result = subprocess.run([PYTHON, "-m", "router.cli", "serve", "--config", str(config),
                             "--port", str(free_port())], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert f"{setting}: Redis refused to authenticate" in result.stderr, result.stderr
    assert WRONG not in result.stderr and "redis://" not in result.stderr, result.stderr


def test_serve_refuses_to_start_on_a_database_redis_does_not_have(
        tmp_path: Path, guarded_redis: ManagedProcess) -> None:
    """`/99` on a server with 16 databases: waiting will not mend it, so it is a configuration
    error naming the setting (it started degraded for good, every keyed request a 503, and
    `/readyz` said the store was unavailable)."""
    config = tmp_path / "config.yaml"
    config.write_text(MINIMAL_CONFIG + f"server:\n  idempotency_redis_url: "
                      f"'redis://:{PASSWORD}@127.0.0.1:{guarded_redis.port}/99'\n")
    result = subprocess.run([PYTHON, "-m", "router.cli", "serve", "--config", str(config),
                             "--port", str(free_port())], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert ("server.idempotency_redis_url: Redis has no database of the number the URL gives"
            in result.stderr), result.stderr
    assert PASSWORD not in result.stderr and "Traceback" not in result.stderr


def test_readyz_names_a_password_rotated_under_the_service(
        tmp_path: Path, guarded_redis: ManagedProcess) -> None:
    """The right password starts the service; once Redis takes another one, `/readyz` says
    which setting's credentials it refuses (it stays ready: keyless requests are served):
    first of new connections, within a look's interval (Redis keeps the connections it has
    authenticated, and the store's still answer), then of the store's own once they are closed
    (as a restart or a failover closes them), when keyed requests are refused."""
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded_redis.port}/0"
    rotated = f"redis://:rotated-{PASSWORD}@127.0.0.1:{guarded_redis.port}/0"
    router = start_router(tmp_path, MINIMAL_CONFIG + f"server:\n  idempotency_redis_url: '{url}'\n")
    try:
        def idempotency_detail() -> str:
            with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as response:
                return str(json.loads(response.read())["checks"]["idempotency"]["detail"])

        def detail_once(done: Callable[[str], bool]) -> str:
            waited_until = time.monotonic() + 4 * LOOK_EVERY_S
            while not done(detail := idempotency_detail()) and time.monotonic() < waited_until:
                time.sleep(0.2)
            return detail

        assert idempotency_detail() == "redis"
        with redis.Redis.from_url(url) as client:
            client.config_set("requirepass", "rotated-" + PASSWORD)
        to_new = detail_once(lambda detail: detail != "redis")
        with redis.Redis.from_url(rotated) as client:
            client.client_kill_filter(_type="normal", skipme=True)
        refused = _keyed_request(router.base_url)
        detail = idempotency_detail()
    finally:
        router.stop()
    assert to_new.startswith("server.idempotency_redis_url: Redis refused to authenticate") \
        and "to new connections (those open still answer)" in to_new, to_new
    assert detail.startswith("server.idempotency_redis_url: Redis refused to authenticate") \
        and "new connections" not in detail, detail
    assert PASSWORD not in to_new + detail, detail
    # No retry mends a refused password: the SDKs are told not to retry, and nothing says
    # "retry shortly" (it said so, with `retry-after: 1`, until 2026-12-06).
    status, headers, body = refused
    assert status == 503 and body["error"]["code"] == "idempotency_store_misconfigured", body
    assert headers.get("x-should-retry") == "false" and "retry-after" not in headers, headers
    assert "retry" in body["error"]["message"] and "shortly" not in body["error"]["message"]
    assert PASSWORD not in json.dumps(body)


EXPERIMENT = """models: [{name: m, deployments: [d]}, {name: m2, deployments: [d]}]
policies: {default: {candidates: [m, m2]}}
experiments:
  - {name: e, tasks: [chat], unit: request, salt: s, metrics: [{name: ok, kind: binary}],
     arms: [{name: c, route: "policy:default", control: true, share: 0.5},
            {name: t, route: "model:m2", share: 0.5}]}
"""


def test_the_experiments_store_refusing_a_rotated_password_is_not_worth_a_retry(
        tmp_path: Path, guarded_redis: ManagedProcess) -> None:
    """As the idempotency store's: a password rotated under the service answers the
    experiments' endpoints with a 503 the SDKs are told not to retry (it was
    `experiments_store_unavailable` with `retry-after: 1`, retried in vain: the docs audit of
    2026-12-07)."""
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded_redis.port}/1"
    config = MINIMAL_CONFIG.replace("models: [{name: m, deployments: [d]}]\n", EXPERIMENT)
    router = start_router(tmp_path, config + f"server:\n  experiments_redis_url: '{url}'\n")
    try:
        with urllib.request.urlopen(f"{router.base_url}/v1/experiments", timeout=10) as answer:
            assert answer.status == 200
        with redis.Redis.from_url(url) as client:
            client.config_set("requirepass", "rotated-" + PASSWORD)
            client.client_kill_filter(_type="normal")  # the router's pooled connections
        try:
            urllib.request.urlopen(f"{router.base_url}/v1/experiments", timeout=10)
        except urllib.error.HTTPError as refused:
            status, headers = refused.code, {k.lower(): v for k, v in refused.headers.items()}
            body = json.loads(refused.read())
        else:
            raise AssertionError("the experiments were reported with a refused password")
    finally:
        router.stop()
    assert status == 503 and body["error"]["code"] == "experiments_store_misconfigured", body
    assert headers.get("x-should-retry") == "false" and "retry-after" not in headers, headers
    assert PASSWORD not in json.dumps(body)


def test_a_user_denied_info_is_ready_and_not_refused(tmp_path: Path) -> None:
    """A least-privilege ACL user (every command but `@dangerous` ones, INFO among them) runs
    every command the stores send: `/readyz` says the store is fine (its background look read
    INFO's NOPERM as refused credentials, a healthy store degraded: the re-audit of
    2026-12-07)."""
    proc = start_redis(tmp_path, ("--user", "slo", "on", f">{PASSWORD}", "~*", "&*", "+@all",
                                  "-@dangerous"))
    try:
        url = f"redis://slo:{PASSWORD}@127.0.0.1:{proc.port}/0"
        router = start_router(tmp_path, MINIMAL_CONFIG
                              + f"server:\n  idempotency_redis_url: '{url}'\n")
        try:
            checks = []
            for _ in range(3):  # the first look, and one taken after it in the background
                with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as answer:
                    checks.append(json.loads(answer.read())["checks"]["idempotency"])
                time.sleep(0.6)
        finally:
            router.stop()
    finally:
        proc.stop()
    assert all(c["detail"] == "redis" and not c.get("degraded") for c in checks), checks


def test_no_start_up_or_readiness_line_shows_an_unreachable_redis_password(
        tmp_path: Path) -> None:
    """Every Redis setting on an address nothing listens on, its password in the URL (one
    `${NAME}`-substituted): the service starts (an outage is no configuration error), `/readyz`
    reports the stores down, a keyed request is refused, and no line of its log at DEBUG
    (start-up, readiness, the refusal) holds a password or a URL with one."""
    port = free_port()  # nothing listens there
    urls = {"cache": f"redis://:cache-pw-unreached-1@127.0.0.1:{port}/0",
            "stats": f"rediss://ops:stats-pw-unreached-2@127.0.0.1:{port}/1",
            "idempotency": f"redis://:idem-pw-unreached-3@127.0.0.1:{port}/2"}
    yaml = (f"server:\n  cache: {{backend: redis, redis_url: '{urls['cache']}'}}\n"
            f"  stats: {{redis_url: '{urls['stats']}'}}\n"
            "  idempotency_redis_url: '${IDEMPOTENCY_URL}'\n")
    router = start_router(tmp_path, MINIMAL_CONFIG + yaml,
                          env={"IDEMPOTENCY_URL": urls["idempotency"]},
                          extra_args=("--log-level", "debug"))
    try:
        with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=30) as response:
            checks = json.loads(response.read())["checks"]
        keyed = _keyed_request(router.base_url, "k-unreached")[0]
    finally:
        router.stop()
    assert "redis unavailable" in str(checks["idempotency"]["detail"]), checks
    log = (tmp_path / "router.log").read_text(errors="replace")
    assert "starting" in log and keyed == 503, log[-2000:]
    for url in urls.values():
        password = url.split(":")[2].split("@")[0]
        assert password not in log, log[-2000:]
        assert url not in log
    # Said at start-up, per setting, not left to the first request that needs it (the
    # misconfiguration audit of 2026-12-06: only info lines until a keyed request's 503).
    warned = [json.loads(line) for line in log.splitlines()
              if '"redis_unreachable_at_start"' in line]
    assert {w["setting"] for w in warned} == {
        "server.cache.redis_url", "server.stats.redis_url", "server.idempotency_redis_url"}, log
    assert all(w["level"] == "warning" for w in warned), warned
    tls = next(w for w in warned if w["setting"] == "server.stats.redis_url")
    assert "TLS" in tls["error"], tls


def _keyed_request(base_url: str, key: str = "k-rotated"
                   ) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Status, headers (lower-case) and body of a chat request sent with an Idempotency-Key."""
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json", "idempotency-key": key})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return (int(response.status), {k.lower(): v for k, v in response.headers.items()},
                    json.loads(response.read()))
    except urllib.error.HTTPError as refused:
        return (refused.code, {k.lower(): v for k, v in refused.headers.items()},
                json.loads(refused.read()))
