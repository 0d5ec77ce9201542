"""One tenant's poison prompts do not move every tenant's `auto` traffic to a dearer deployment.

`pt-fast` and `pt-big` answer alike, `pt-big` at twice the price, and `min_cost` sends tenant
A's `auto` requests to `pt-fast`. Tenant B sends requests pinned to `fast` whose prompt makes
the provider answer 500 (the simulator's `<<fail:500>>` marker, as real providers do with some
inputs). The breaker kept `pt-fast` closed (its failures are attributed to their tenant), but
the statistics the ranking reads counted every one of B's failed attempts as `pt-fast`'s: A's
requests moved to `pt-big` (32 of 41 while B sent, 39 of 40 after it stopped, in the security
audit's run) and `/v1/route/explain` showed `pt-fast` with `error_rate_over_budget`. Now a
failure is recorded as the deployment's only when it does not stand alone: while the
deployment serves another tenant fine, one tenant's failures are its own
(`router/stats/attribution.py`). A deployment failing for every tenant still loses its traffic
within seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.services import Running, start_router, start_simulator

pytestmark = pytest.mark.integration

KEYS = {"KEY_A": "sk-attribution-tenant-a", "KEY_B": "sk-attribution-tenant-b"}
PROFILE = {"ttft_p50_ms": 20, "ttft_p99_ms": 40, "tpot_p50_ms": 1, "tpot_p99_ms": 2,
           "output_tokens_p50": 12, "output_tokens_p99": 20, "output_tokens_max": 20}
CONFIG = """version: 1
deployments:
  - {{name: pt-fast, model: openai/{fast}, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 1, output_price_per_mtok: 1, timeout_s: 10}}
  - {{name: pt-big, model: openai/{big}, adapter: openai_passthrough, api_base: '{base}/v1',
     input_price_per_mtok: 2, output_price_per_mtok: 2, timeout_s: 10}}
models:
  - {{name: fast, deployments: [pt-fast]}}
  - {{name: big, deployments: [pt-big]}}
routes: {{aliases: [auto]}}
policies:
  default:
    candidates: [fast, big]
    objective: min_cost
    slo: {{ttft_p95_ms: 1500, e2e_p99_ms: 30000}}
api_keys:
  - {{key: env:KEY_A, tenant: tenant-a}}
  - {{key: env:KEY_B, tenant: tenant-b}}
server:
  cache: {{backend: none}}
"""
Seen = tuple[float, int, str | None, str | None]  # (time, status, deployment, error code)
PACE_S = 0.2  # each tenant's requests, one at a time: about 5 a second
PHASE_S = 8.0


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Path]]:
    """The simulator, and the directory its routers run in. Each test has its own pair of
    simulator models (one test's outage leaves the other's alone) and its own router (its
    statistics are process state)."""
    directory = tmp_path_factory.mktemp("tenant-attribution")
    sim = start_simulator(directory, {name: PROFILE for name in
                                      ("fast", "big", "fast-2", "big-2", "fast-3", "big-3")})
    try:
        yield sim, directory
    finally:
        sim.stop()


def _router(simulator: tuple[Running, Path], name: str, fast: str, big: str,
            stack: ExitStack) -> Running:
    sim, directory = simulator
    router = start_router(directory, CONFIG.format(base=sim.base_url, fast=fast, big=big),
                          env=KEYS, name=name)
    stack.callback(router.stop)
    return router


def _body(model: str, text: str) -> dict[str, object]:
    return {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": text}]}


def _headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[key]}", "x-slorouter-task": "chat"}


async def _tenant(http: httpx.AsyncClient, key: str, model: str, text: str,
                  seen: list[Seen],
                  stop: asyncio.Event) -> None:
    """One tenant's requests, paced, until `stop`: (time, status, deployment, error code)."""
    number = 0
    while not stop.is_set():
        number += 1
        reply = await http.post("/v1/chat/completions", headers=_headers(key),
                                json=_body(model, f"{text} {number}"))
        code = reply.json().get("error", {}).get("code") if reply.is_error else None
        seen.append((time.monotonic(), reply.status_code, reply.headers.get("x-slorouter-model"),
                     code))
        await asyncio.sleep(PACE_S)


def _explained(router: Running) -> dict[str, str]:
    """Tenant A's next `auto` request as `/v1/route/explain` ranks it: deployment → detail,
    the chosen one first."""
    reply = httpx.post(f"{router.base_url}/v1/route/explain", headers=_headers("KEY_A"),
                       json=_body("auto", "Say hello"), timeout=10)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    details = {c["deployment"]: str(c["score_detail"]) for c in body["candidates"]}
    first = body["choice"]["deployments"][0]
    return {first: details[first], **details}


async def _seconds_until_moved(router: Running, sim: Running, model: str) -> float | None:
    """`pt-fast` first for tenant A; then the simulator's `model` (its upstream) answers 500 to
    everything: the seconds until `/v1/route/explain` puts `pt-big` first (polled every 0.25 s,
    None after `PHASE_S`)."""
    assert await asyncio.to_thread(_explained_off_loop, router) == "pt-fast"
    httpx.post(f"{sim.base_url}/control/models/{model}",
               json={"error_rate_500": 1.0}, timeout=5).raise_for_status()
    onset = time.monotonic()
    while time.monotonic() - onset < PHASE_S:
        await asyncio.sleep(0.25)
        if await asyncio.to_thread(_explained_off_loop, router) == "pt-big":
            return time.monotonic() - onset
    return None


def test_one_tenants_poison_prompts_leave_the_others_traffic_on_the_cheaper_deployment(
        simulator: tuple[Running, Path]) -> None:
    """A's `auto` requests stay on `pt-fast` while B's pinned poison prompts fail there (every
    one with the provider's 500, none refused `circuit_open`) and after B stopped; the ranking
    shows no error rate over budget for `pt-fast`."""
    with ExitStack() as stack:
        router = _router(simulator, "router-poison", "fast", "big", stack)

        async def scenario() -> tuple[list[Seen], list[Seen], float, float]:
            tenant_a: list[Seen] = []
            poison: list[Seen] = []
            async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
                stop_a, stop_b = asyncio.Event(), asyncio.Event()
                sending_a = asyncio.create_task(
                    _tenant(http, "KEY_A", "auto", "Say hello number", tenant_a, stop_a))
                await asyncio.sleep(PHASE_S / 2)
                began = time.monotonic()
                sending_b = asyncio.create_task(
                    _tenant(http, "KEY_B", "fast", "<<fail:500>> x", poison, stop_b))
                await asyncio.sleep(PHASE_S)
                stop_b.set()
                await sending_b
                ended = time.monotonic()
                await asyncio.sleep(PHASE_S / 2)
                stop_a.set()
                await sending_a
            return tenant_a, poison, began, ended

        tenant_a, poison, began, ended = asyncio.run(scenario())
        explained = _explained(router)
    assert all(status == 200 for _, status, _, _ in tenant_a), tenant_a
    assert len(poison) >= 20, len(poison)
    assert all(status >= 500 and code != "circuit_open" for _, status, _, code in poison), \
        Counter((status, code) for _, status, _, code in poison)
    during = Counter(model for at, _, model, _ in tenant_a if began + 1.0 <= at < ended)
    after = Counter(model for at, _, model, _ in tenant_a if at >= ended)
    # Exploration (3%) may send one or two to `pt-big`, and on a loaded machine a few more: a
    # request of B's still waiting for its 500 reads as a stalling `pt-fast` (the stall
    # signal, by design; 3 of 17 in a CI run beside other jobs). Counted as `pt-fast`'s
    # failures, B's 500s moved 28 of 30 of A's requests (the old code).
    assert during["pt-fast"] >= 0.7 * sum(during.values()), (during, after)
    assert after["pt-fast"] >= 0.7 * sum(after.values()), (during, after)
    first = next(iter(explained))
    assert first == "pt-fast", explained
    assert "error_rate_over_budget" not in explained["pt-fast"], explained
    assert "demoted_by_burn_rate" not in explained["pt-fast"], explained


def test_an_outage_failing_both_tenants_still_moves_their_traffic_within_seconds(
        simulator: tuple[Running, Path]) -> None:
    """Both tenants served on `pt-fast`, then its model answers 500 to everything: within a
    few seconds the ranking puts `pt-big` first (`pt-fast` over its error budget) and the
    simulator's `fast-2` model stops getting first attempts."""
    sim, _ = simulator
    with ExitStack() as stack:
        router = _router(simulator, "router-outage", "fast-2", "big-2", stack)

        async def scenario() -> float | None:
            seen: list[Seen] = []
            async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
                stop = asyncio.Event()
                tenants = [asyncio.create_task(
                    _tenant(http, key, "auto", f"Say hello from {key}", seen, stop))
                    for key in KEYS]
                await asyncio.sleep(PHASE_S / 2)
                moved = await _seconds_until_moved(router, sim, "fast-2")
                stop.set()
                await asyncio.gather(*tenants)
            return moved

        try:
            moved = asyncio.run(scenario())
        finally:
            httpx.post(f"{sim.base_url}/control/models/fast-2", json={"error_rate_500": 0.0},
                       timeout=5).raise_for_status()
    assert moved is not None and moved <= 3.0, moved


def _explained_off_loop(router: Running) -> str:
    return next(iter(_explained(router)))


def test_an_outage_after_another_tenants_one_request_moves_the_busy_tenants_traffic(
        simulator: tuple[Running, Path]) -> None:
    """B is served once on `pt-fast`, then only A sends; `pt-fast` fails everything: A's
    failures are `pt-fast`'s once no answer of another tenant's began within 2 s before them.
    B's one success, still in the window,
    held every one of them back as A's own (the re-audit of 2026-12-07: `pt-big` first after
    7-8 s instead of 0.5 s, and 12-15 of A's requests answered 503 as the retry budget ran out
    on fallbacks)."""
    sim, _ = simulator
    with ExitStack() as stack:
        router = _router(simulator, "router-stale", "fast-3", "big-3", stack)

        async def scenario() -> tuple[float | None, list[Seen]]:
            seen: list[Seen] = []
            async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
                once = await http.post("/v1/chat/completions", headers=_headers("KEY_B"),
                                       json=_body("fast", "Say hello from B"))
                assert once.status_code == 200, once.text
                stop = asyncio.Event()
                tenant_a = asyncio.create_task(
                    _tenant(http, "KEY_A", "auto", "Say hello from A", seen, stop))
                await asyncio.sleep(PHASE_S / 4)
                moved = await _seconds_until_moved(router, sim, "fast-3")
                await asyncio.sleep(1.0)
                stop.set()
                await tenant_a
            return moved, seen

        try:
            moved, seen = asyncio.run(scenario())
        finally:
            httpx.post(f"{sim.base_url}/control/models/fast-3", json={"error_rate_500": 0.0},
                       timeout=5).raise_for_status()
    refused = Counter((status, code) for _, status, _, code in seen if status != 200)
    # B's answer began about 2 s before the outage (`recent_s`): at most A's first failures
    # are held back; on a loaded machine the ranking's move may take a poll or two longer and
    # the retry budget refuse a fallback meanwhile (the merge's code: 12-15 refused, moved at
    # 7-8 s)
    assert moved is not None and moved <= 4.0, (moved, refused)
    assert sum(refused.values()) <= 3, refused
