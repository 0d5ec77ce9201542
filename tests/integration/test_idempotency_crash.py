"""Idempotency leases across replicas when a holder crashes, or runs long.

Two `slorouter serve` replicas share one `redis-server` for Idempotency-Key records
(`request_timeout_s: 20`), in front of the simulator. A keyed request sent to replica A, which
is SIGKILLed a second later, is repeated at replica B. Before, A's lease was the request's
whole deadline: B waited ~19 s for it to expire, called upstream with ~1 s left and answered
504 `first_token_timeout` at 20 s (for a side effect, a doomed call the provider may act on).
Now leases are short and renewed by their live holder: B wins the key within seconds of the
crash and answers; a live holder keeps its key past many leases (a stream too); and a
duplicate that wins the key with less time left than it waited gives it back with a 409.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from router.idempotency import LEASE_S
from tests.support.procs import ManagedProcess
from tests.support.redis_server import start_redis
from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

FAST = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
        "output_tokens_p50": 12, "output_tokens_p99": 20}
MODELS = {"ttft3": {**FAST, "ttft_p50_ms": 3000, "ttft_p99_ms": 3001},
          "ttft12": {**FAST, "ttft_p50_ms": 12000, "ttft_p99_ms": 12001}}
TIMEOUT_S = 20


def _config(sim_base: str, redis_url: str, lease_s: float | None = None) -> str:
    deployments = "".join(f"""
  - {{name: {m}, model: openai/{m}, adapter: openai_passthrough, api_base: {sim_base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 18}}""" for m in MODELS)
    models = ", ".join(f"{{name: {m}, deployments: [{m}]}}" for m in MODELS)
    return f"""version: 1
deployments:{deployments}
models: [{models}]
routes: {{default_model: ttft3}}
server:
  request_timeout_s: {TIMEOUT_S}
  idempotency_redis_url: {redis_url}
""" + (f"  idempotency_lease_s: {lease_s}\n" if lease_s is not None else "")


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, str]]:
    directory = tmp_path_factory.mktemp("idempotency-crash")
    with ExitStack() as started:
        redis = start_redis(directory)
        started.callback(redis.stop)
        sim = start_simulator(directory, MODELS)
        started.callback(sim.stop)
        yield sim, f"redis://127.0.0.1:{redis.port}/0"


@pytest.fixture
def replicas(backends: tuple[Running, str], tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[tuple[Running, Running]]:
    """Two replicas; a test marked `lease_s(x)` runs them with `idempotency_lease_s: x`."""
    sim, redis_url = backends
    marker = request.node.get_closest_marker("lease_s")
    lease_s = marker.args[0] if marker is not None else None
    with ExitStack() as started:
        routers = []
        for name in ("a", "b"):
            router = start_router(tmp_path, _config(sim.base_url, redis_url, lease_s), name=name)
            started.callback(router.stop)
            routers.append(router)
        yield routers[0], routers[1]


def _client(router: Running) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0,
                         timeout=60)


def _ask(router: Running, key: str, model: str = "ttft3", *, stream: bool = False,
         timeout_ms: int | None = None, acting: bool = False) -> Any:
    headers = {"idempotency-key": key}
    if acting:
        headers["x-slorouter-task"] = "action"
    if timeout_ms is not None:
        headers["x-slorouter-timeout-ms"] = str(timeout_ms)
    raw = _client(router).chat.completions.with_raw_response.create(
        model=model, stream=stream, extra_headers=headers,
        # a read (`chat`), unless `acting` hints an action: "transfer for KEY" read as one
        messages=[{"role": "user", "content": f"What does idempotent mean? ({key})"}])
    response = raw.http_response
    if stream:
        response.read()
    return response


def _ask_expecting_error(router: Running, key: str, **kwargs: object) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        _ask(router, key, **kwargs)  # type: ignore[arg-type]
    return caught.value


def _crash_while_holding(a: Running, key: str, pool: ThreadPoolExecutor,
                         acting: bool = False) -> Future[Any]:
    """Send `key` to `a` and SIGKILL it a second later, while its upstream call is pending."""
    sent = pool.submit(_ask, a, key, acting=acting)
    time.sleep(1.0)
    proc: ManagedProcess = a.proc
    proc.kill()
    return sent


def test_a_crashed_holder_frees_its_key_within_a_lease(replicas: tuple[Running, Running]
                                                       ) -> None:
    """B answers the duplicate within a lease and a TTFT of A's crash, not at its deadline."""
    a, b = replicas
    with ThreadPoolExecutor(1) as pool:
        sent = _crash_while_holding(a, "crash-1", pool)
        crashed_at = time.monotonic()
        response = _ask(b, "crash-1")
        took = time.monotonic() - crashed_at
        with pytest.raises(openai.APIConnectionError):
            sent.result(timeout=10)
    assert response.status_code == 200
    assert response.headers.get("x-slorouter-idempotent-replay") is None  # B ran it
    assert took < LEASE_S + 3 + 3, f"answered {took:.1f}s after the crash"


def test_a_side_effect_whose_holder_crashed_is_an_unknown_commit_not_run_again(
        replicas: tuple[Running, Running], backends: tuple[Running, str]) -> None:
    """A side effect's call may have reached the provider when its replica died: the duplicate
    at B gets the 504 `unknown_commit` a graceful stop would have given, once the lease ends,
    and so does every retry after it; the provider saw one call (the audit: a second one, and
    a 200, so a payment ran twice)."""
    a, b = replicas
    sim, _ = backends
    before = _calls(sim)
    with ThreadPoolExecutor(1) as pool:
        sent = _crash_while_holding(a, "crash-act", pool, acting=True)
        refused = _ask_expecting_error(b, "crash-act", acting=True)
        again = _ask_expecting_error(b, "crash-act", acting=True)
        with pytest.raises(openai.APIConnectionError):
            sent.result(timeout=10)
    for answer in (refused, again):
        assert answer.status_code == 504 and answer.code == "unknown_commit"
        assert answer.response.headers["x-should-retry"] == "false"
        assert answer.response.headers["x-slorouter-idempotent-replay"] == "true"
    assert _calls(sim) - before == 1


def _calls(sim: Running) -> int:
    stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()
    return sum(int(m.get("requests", 0)) for m in stats["models"].values())


def test_a_duplicate_that_wins_the_key_too_late_gives_it_back(
        replicas: tuple[Running, Running]) -> None:
    """With 6 s of its own, B waits ~4 s for the crashed holder's lease: it refuses (409,
    Retry-After) within its time instead of calling a 3 s upstream with 2 s left, and the same
    key retried then runs."""
    a, b = replicas
    with ThreadPoolExecutor(1) as pool:
        sent = _crash_while_holding(a, "crash-2", pool)
        asked_at = time.monotonic()
        refused = _ask_expecting_error(b, "crash-2", timeout_ms=6000)
        took = time.monotonic() - asked_at
        with pytest.raises(openai.APIConnectionError):
            sent.result(timeout=10)
    assert refused.status_code == 409, refused.response.text
    assert refused.code == "idempotency_key_won_late"
    assert refused.response.headers["retry-after"] == "1"
    assert took < 6.0
    assert _ask(b, "crash-2").status_code == 200


@pytest.mark.lease_s(1.0)
def test_a_shorter_lease_lets_the_duplicate_run_within_its_time(
        replicas: tuple[Running, Running]) -> None:
    """The same crash and the same 6 s as above, with `idempotency_lease_s: 1`: B wins the key
    about a second after the crash, with time left for the 3 s upstream, and answers it (with
    the default 5 s lease it gives the key back with a 409)."""
    a, b = replicas
    with ThreadPoolExecutor(1) as pool:
        sent = _crash_while_holding(a, "crash-3", pool)
        response = _ask(b, "crash-3", timeout_ms=6000)
        with pytest.raises(openai.APIConnectionError):
            sent.result(timeout=10)
    assert response.status_code == 200
    assert response.headers.get("x-slorouter-idempotent-replay") is None  # B ran it


def test_a_live_holder_keeps_its_key_past_many_leases(replicas: tuple[Running, Running]) -> None:
    """A stream running 12 s (over two leases) holds its key: B's duplicate, sent meanwhile,
    waits for it and replays its answer instead of running a second time."""
    a, b = replicas
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_ask, a, "long-1", "ttft12", stream=True)
        time.sleep(1.0)
        duplicate = _ask(b, "long-1", "ttft12")
        assert first.result(timeout=30).status_code == 200
    assert duplicate.status_code == 200
    assert duplicate.headers.get("x-slorouter-idempotent-replay") == "true"
