"""Admission control under 3x overload, on the real service.

A router with a small interactive pool (`max_concurrency` 4, no queue) in front of a simulator
model with a constant 400 ms answer. Capacity is measured, not assumed: the unloaded E2E gives
`max_concurrency / p50` requests per second, and Poisson arrivals at three times that are
offered twice in a row. Admitted requests must keep their unloaded latency, rejections must be
immediate with `Retry-After`, the upstream must never see more than the pool's concurrency, and
the router's resident memory must not grow from one identical round to the next.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.faults.scenarios import (
    API_KEY,
    MESSAGES,
    TENANT_ENV,
    Call,
    Dep,
    Shot,
    SimCounters,
    chat_body,
    closed_loop,
    interactive_pool,
    open_loop,
    percentile,
    router_yaml,
    rss_kib,
    run,
)
from tests.support.services import Running, start_router

# exclusive: the p99s compared are the router's, not another xdist worker's load
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

MAX_CONCURRENCY = 4
OVERLOAD = 3.0
ROUND_S = 5.0
REJECTION_BUDGET_S = 0.050  # the acceptance: rejections answered within 50 ms
RSS_GROWTH_LIMIT_KIB = 16 * 1024  # between two identical rounds
RELIABILITY = interactive_pool(MAX_CONCURRENCY, 0, 0.5)


@pytest.fixture(scope="module")
def gateway(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    config = router_yaml(sim.base_url, [Dep("capacity", "capacity")],
                         {"capacity": ["capacity"]}, RELIABILITY)
    running = start_router(tmp_path_factory.mktemp("overload-router"), config, env=TENANT_ENV)
    yield running
    running.stop()


class InFlightWatch:
    """Largest `in_flight + queued` the simulator reports for one model while it runs."""

    def __init__(self, counters: SimCounters, model: str) -> None:
        self._counters, self._model = counters, model
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.peak = 0

    def __enter__(self) -> InFlightWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            stats = self._counters.read().get(self._model, {})
            self.peak = max(self.peak, int(stats.get("in_flight", 0)) + int(
                stats.get("queued", 0)))
            self._stop.wait(0.02)


@pytest.fixture(scope="module")
def overload(gateway: Running, counters: SimCounters) -> dict[str, object]:
    """Unloaded baseline, then two identical rounds at 3x capacity; RSS around each."""
    call = Call(chat_body("capacity"))
    run(closed_loop(gateway.base_url, [call] * 4, concurrency=1))  # warm connections
    unloaded: list[Shot] = run(closed_loop(gateway.base_url, [call] * 20, concurrency=1))
    assert all(s.ok for s in unloaded)
    p50 = percentile([s.e2e_s for s in unloaded], 50)
    rate = OVERLOAD * MAX_CONCURRENCY / p50
    count = int(rate * ROUND_S)
    rss = [rss_kib(gateway.proc.pid)]
    rounds: list[list[Shot]] = []
    with InFlightWatch(counters, "capacity") as watch:
        for seed in (1, 2):
            rounds.append(run(open_loop(gateway.base_url, [call] * count, rate, seed=seed)))
            rss.append(rss_kib(gateway.proc.pid))
    return {"unloaded": unloaded, "rounds": rounds, "rate": rate, "rss": rss,
            "peak_upstream": watch.peak}


def _shots(overload: dict[str, object]) -> list[Shot]:
    rounds = overload["rounds"]
    assert isinstance(rounds, list)
    return [shot for one in rounds for shot in one]


def test_overload_is_real_and_admitted_requests_still_succeed(
        overload: dict[str, object]) -> None:
    """At 3x capacity many requests are turned away, and the admitted ones all succeed."""
    shots = _shots(overload)
    admitted = [s for s in shots if s.status == 200]
    assert len(shots) - len(admitted) >= 0.4 * len(shots)
    assert all(s.ok for s in admitted)
    assert len(admitted) >= 0.5 * len(shots) / OVERLOAD


def test_admitted_requests_keep_p99_within_one_and_a_half_times_unloaded(
        overload: dict[str, object]) -> None:
    """p99 E2E of admitted requests under 3x load stays within 1.5x of the unloaded p99."""
    unloaded = overload["unloaded"]
    assert isinstance(unloaded, list)
    base_p99 = percentile([s.e2e_s for s in unloaded], 99)
    loaded_p99 = percentile([s.e2e_s for s in _shots(overload) if s.ok], 99)
    assert loaded_p99 <= 1.5 * base_p99, (loaded_p99, base_p99)


def test_rejections_are_immediate_and_carry_retry_after(overload: dict[str, object]) -> None:
    """Rejections are 429/503 with Retry-After, typically within 50 ms, never waiting for a slot."""
    # Measured at the client on a shared 2-core machine, so the p99 bound is the configured
    # upstream delay rather than 50 ms; bench/chaos.py prints the p99 beside /healthz's.
    rejected = [s for s in _shots(overload) if s.status != 200]
    assert {s.status for s in rejected} <= {429, 503}, {s.status for s in rejected}
    assert all(s.retry_after is not None and int(s.retry_after) >= 1 for s in rejected)
    latencies = [s.e2e_s for s in rejected]
    unloaded = overload["unloaded"]
    assert isinstance(unloaded, list)
    upstream_s = percentile([s.e2e_s for s in unloaded], 50)
    summary = (percentile(latencies, 50), percentile(latencies, 99), max(latencies))
    assert percentile(latencies, 50) <= REJECTION_BUDGET_S, summary
    assert percentile(latencies, 99) < upstream_s, summary


def test_upstream_concurrency_never_exceeds_the_pool(overload: dict[str, object]) -> None:
    """The simulator never sees more concurrent calls than the admission pool allows."""
    peak = overload["peak_upstream"]
    assert isinstance(peak, int)
    assert 0 < peak <= MAX_CONCURRENCY


def test_router_memory_stays_bounded_across_overload_rounds(
        overload: dict[str, object]) -> None:
    """The router's RSS does not keep growing: the second identical round adds < 16 MiB."""
    rss = overload["rss"]
    assert isinstance(rss, list)
    assert rss[2] - rss[1] <= RSS_GROWTH_LIMIT_KIB, rss


SDK_CALLS = 40


async def _refusal_waits(base_url: str) -> list[str | None]:
    """`retry-after-ms` of the refusals among SDK_CALLS requests sent at once."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        responses = await asyncio.gather(*[client.post(
            "/v1/chat/completions", json=chat_body("capacity"),
            headers={"authorization": f"Bearer {API_KEY}"}) for _ in range(SDK_CALLS)])
    return [r.headers.get("retry-after-ms") for r in responses if r.status_code != 200]


async def _sdk_burst(base_url: str) -> list[bool]:
    """SDK_CALLS calls of the OpenAI SDK at once, with its own two retries: which succeeded."""
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=API_KEY, max_retries=2)

    async def call() -> bool:
        try:
            await client.chat.completions.create(
                model="capacity", messages=[{"role": "user", "content": MESSAGES[0]["content"]}])
        except openai.APIStatusError:
            return False
        return True

    async with client:
        return await asyncio.gather(*[call() for _ in range(SDK_CALLS)])


def test_refused_clients_are_told_to_come_back_at_spread_out_times(
        gateway: Running, counters: SimCounters) -> None:
    """Refusals carry a jittered `retry-after-ms` (which the SDKs read before `retry-after`):
    with the same whole seconds for everyone refused at once, the SDKs' retries all came back
    together, 4 of them got the 4 slots, the rest were refused again and the pool idled between
    the waves (40 calls, 4 slots, 400 ms answers: 12 served). Spread out, more are served, and
    the SDK's retries stay bounded: upstream sees only the calls that were served."""
    waits = run(_refusal_waits(gateway.base_url))
    assert len(waits) >= SDK_CALLS // 2 and None not in waits, waits
    assert len(set(waits)) >= 5 and all(int(w or 0) >= 1000 for w in waits), waits
    before = counters.value("capacity")
    served = run(_sdk_burst(gateway.base_url))
    assert counters.value("capacity") - before == sum(served)
    assert sum(served) > 3 * MAX_CONCURRENCY, served  # more than one slot-full per wave
