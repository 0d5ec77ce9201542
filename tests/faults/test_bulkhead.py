"""The per-deployment bulkhead (`max_in_flight`) on the real service, with the real `openai` client.

A simulator model that takes requests and never answers (`bulk-hang`) is the first choice of
every request; a healthy one (`bulk-ok`) is its fallback; the admission pool is small (4 slots,
no queue) and the deadline 2 s. Without a cap every admitted request waits on the hanging
deployment until its deadline, holding its admission slot, so the healthy deployment answers
nothing and the rest are refused `overloaded`. With `max_in_flight: 2` at most two requests wait
there; the others skip it at once and are answered by the healthy deployment. A request whose
only deployment is at its cap is refused at once with a 503 `deployment_saturated` and a
`Retry-After`, and never reaches the upstream.

Then the count must be exact: after a burst of hedged, retried, cut, deadline-bound, abandoned
and client-cancelled requests, every deployment's attempts in flight (from
`GET /v1/health/deployments`) return to zero, and no deployment ever had more than its cap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from tests.faults.scenarios import (
    API_KEY,
    CHAT_HEADERS,
    MESSAGES,
    TENANT_ENV,
    BreakerWatch,
    Dep,
    SimCounters,
    attempts_in_flight,
    interactive_pool,
    router_yaml,
    run,
)
from tests.support.services import Running, start_router

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 2.0
CAP = 2
OFFERED = 30  # requests, one every 50 ms: all sent well within one deadline
GAP_S = 0.05
RELIABILITY = interactive_pool(4, 0, 0.5)
HANG_FIRST = """policies:
  default:
    candidates: [hangm]
    fallbacks: [okm]
    hedging: false
"""


def _hang_first_config(sim_base: str, capped: bool) -> str:
    deps = [Dep("hang", "bulk-hang", max_in_flight=CAP if capped else None),
            Dep("ok", "bulk-ok"),
            Dep("solo", "bulk-hang", max_in_flight=1 if capped else None)]
    return router_yaml(sim_base, deps, {"hangm": ["hang"], "okm": ["ok"], "solom": ["solo"]},
                       RELIABILITY, HANG_FIRST, request_timeout_s=DEADLINE_S)


def _hang_first_router(sim: Running, factory: pytest.TempPathFactory,
                       capped: bool) -> Iterator[Running]:
    name = "bulkhead-capped" if capped else "bulkhead-uncapped"
    running = start_router(factory.mktemp(name), _hang_first_config(sim.base_url, capped),
                           env=TENANT_ENV)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def capped(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _hang_first_router(sim, tmp_path_factory, capped=True)


@pytest.fixture(scope="module")
def uncapped(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    yield from _hang_first_router(sim, tmp_path_factory, capped=False)


@dataclass(frozen=True)
class Answer:
    status: int
    deployment: str | None = None
    code: str | None = None
    retry_after: str | None = None


def _client(router: Running, timeout_s: float = 30.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=0,
                              timeout=timeout_s)


async def _ask(client: openai.AsyncOpenAI, model: str = "auto") -> Answer:
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=MESSAGES, extra_headers=CHAT_HEADERS)  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        return Answer(exc.status_code, None, exc.code, exc.response.headers.get("retry-after"))
    return Answer(200, raw.headers.get("x-slorouter-model"))


async def _offer(router: Running) -> list[Answer]:
    """`OFFERED` requests, one every `GAP_S`, each on its own task (open loop)."""
    async with _client(router) as client:
        async def later(i: int) -> Answer:
            await asyncio.sleep(i * GAP_S)
            return await _ask(client)
        return list(await asyncio.gather(*(later(i) for i in range(OFFERED))))


def test_without_a_cap_a_hanging_deployment_starves_the_healthy_one(uncapped: Running) -> None:
    """The failure the bulkhead fixes: every admitted request waits on the hanging deployment
    until its deadline, so none is answered, and the rest find admission full."""
    answers = run(_offer(uncapped))
    assert [a for a in answers if a.status == 200] == []
    refused = [a for a in answers if a.code == "overloaded"]
    assert len(refused) >= OFFERED - 4, answers  # 4 admission slots, all held by the hang


def test_with_a_cap_the_healthy_deployment_keeps_answering(capped: Running) -> None:
    """With `max_in_flight: 2` on the hanging deployment, requests beyond two skip it at once:
    the healthy deployment answers them, and admission never fills."""
    answers = run(_offer(capped))
    answered = [a for a in answers if a.status == 200]
    assert {a.deployment for a in answered} == {"ok"}
    # Two wait on the hang until the deadline; the 50 ms gaps put a few more behind them once
    # those two end, so at most a handful are not answered.
    assert len(answered) >= OFFERED - 2 * CAP, answers
    assert not [a for a in answers if a.code == "overloaded"], answers


def test_a_request_whose_only_deployment_is_full_is_refused_at_once(
        capped: Running, counters: SimCounters) -> None:
    """The only deployment of a pinned model at its cap: a 503 `deployment_saturated` with
    `Retry-After` (about a second, jittered), counted as a skip in the metrics, and no upstream
    call at all."""
    async def scenario() -> tuple[Answer, int]:
        async with _client(capped) as client:
            hanging = asyncio.ensure_future(_ask(client, "solom"))
            await _until(lambda: attempts_in_flight(capped.base_url)["solo"] == 1)
            before = await asyncio.to_thread(counters.value, "bulk-hang")
            refused = await _ask(client, "solom")
            reached = await asyncio.to_thread(counters.value, "bulk-hang") - before
            await hanging
            return refused, reached

    refused, reached = run(scenario())
    assert (refused.status, refused.code) == (503, "deployment_saturated")
    assert refused.retry_after in {"1", "2"}  # a jittered second or so, rounded up
    assert reached == 0
    metrics = httpx.get(f"{capped.base_url}/metrics", timeout=10).text
    skips = [line for line in metrics.splitlines()
             if line.startswith("slorouter_bulkhead_skips") and 'deployment="solo"' in line]
    assert skips and float(skips[0].rsplit(" ", 1)[1]) >= 1, skips


NARROW_CAP = 4
SDK_CALLS = 40


@pytest.fixture(scope="module")
def narrow(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One deployment answering in 400 ms with `max_in_flight: 4`, behind an admission pool
    far larger (64 slots): the bulkhead, not admission, is what refuses."""
    config = router_yaml(sim.base_url, [Dep("narrow", "capacity", max_in_flight=NARROW_CAP)],
                         {"narrowm": ["narrow"]}, interactive_pool(64, 0, 0.5))
    running = start_router(tmp_path_factory.mktemp("bulkhead-narrow"), config, env=TENANT_ENV)
    yield running
    running.stop()


async def _sdk_burst(router: Running) -> tuple[list[bool], list[str | None]]:
    """SDK_CALLS calls of the OpenAI SDK at once, with its own two retries: which succeeded;
    and the `retry-after-ms` of the refusals among SDK_CALLS plain requests sent at once."""
    async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as plain:
        responses = await asyncio.gather(*[plain.post(
            "/v1/chat/completions", headers={"authorization": f"Bearer {API_KEY}"},
            json={"model": "narrowm", "messages": MESSAGES}) for _ in range(SDK_CALLS)])
    waits = [r.headers.get("retry-after-ms") for r in responses if r.status_code != 200]
    sdk = openai.AsyncOpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY, max_retries=2)

    async def call() -> bool:
        try:
            await sdk.chat.completions.create(model="narrowm", messages=MESSAGES)  # type: ignore[arg-type]
        except openai.APIStatusError:
            return False
        return True

    async with sdk:
        return list(await asyncio.gather(*[call() for _ in range(SDK_CALLS)])), waits


def test_clients_refused_by_a_full_deployment_come_back_at_spread_out_times(
        narrow: Running, counters: SimCounters) -> None:
    """A `deployment_saturated` refusal tells each client a jittered wait (`retry-after-ms`,
    which the OpenAI SDKs read first), as admission's refusals do. With `Retry-After: 1` for
    everyone, the SDKs' retries of a burst all came back together a second later, four got
    the four places, the rest were refused again: 40 calls, 400 ms answers, 12 served.
    Spread out, retries find the places that free in between, and upstream still sees only
    the calls that were served (a refusal never reaches it)."""
    before = counters.value("capacity")
    served, waits = run(_sdk_burst(narrow))
    assert len(waits) >= SDK_CALLS // 2 and None not in waits, waits
    assert len(set(waits)) >= 5 and all(int(w or 0) >= 1000 for w in waits), waits
    assert sum(served) > 3 * NARROW_CAP, served  # more than one cap-full per wave
    after = counters.value("capacity")
    assert after - before == SDK_CALLS - len(waits) + sum(served)


async def _until(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    """Poll `condition` (a blocking read) until it holds; fail after `within_s`."""
    give_up = time.monotonic() + within_s
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < give_up, "condition never held"
        await asyncio.sleep(0.02)


# ----------------------------------------------------------------------- exactness of the count

BURST_CAPS = {"hang": 2, "tail": 4, "calm": 8, "cut": 2, "flaky": 2}
BURST_POLICIES = """policies:
  default:
    candidates: [tailm]
    fallbacks: [calmm]
    hedging: true
  tasks:
    summarization:
      candidates: [hangm]
      fallbacks: [cutm, calmm]
      hedging: false
    extraction:
      candidates: [cutm]
      fallbacks: [flakym]
      hedging: false
"""
BURST_RELIABILITY = """    retry_budget: {share: 1.0, floor_per_s: 100}
    hedge_budget: {share: 1.0, floor_per_s: 100}"""
BURST_ROUNDS = 20
WARM_UP_ROUNDS = 6


@pytest.fixture(scope="module")
def burst_router(sim: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    sims = {"hang": "bulk-hang", "tail": "bulk-tail", "calm": "bulk-ok", "cut": "bulk-cut",
            "flaky": "bulk-flaky"}
    deps = [Dep(name, sims[name], max_in_flight=cap) for name, cap in BURST_CAPS.items()]
    config = router_yaml(sim.base_url, deps, {f"{name}m": [name] for name in BURST_CAPS},
                         BURST_RELIABILITY, BURST_POLICIES, request_timeout_s=3.0)
    running = start_router(tmp_path_factory.mktemp("bulkhead-burst"), config, env=TENANT_ENV)
    yield running
    running.stop()


async def _stream(client: openai.AsyncOpenAI, task: str, leave_after: int | None = None,
                  timeout_ms: int | None = None) -> str:
    """A streamed request read to its end (or left after `leave_after` chunks): how it ended."""
    headers = {**CHAT_HEADERS, "x-slorouter-task": task}
    if timeout_ms is not None:
        headers["x-slorouter-timeout-ms"] = str(timeout_ms)
    try:
        stream: openai.AsyncStream[ChatCompletionChunk] = await client.chat.completions.create(
            model="auto", messages=cast(list[ChatCompletionMessageParam], MESSAGES), stream=True,
            extra_headers=headers)
        async with stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if leave_after is not None and seen >= leave_after:
                    return "left"
        return "done"
    except openai.APIError as exc:
        return type(exc).__name__


async def _complete(client: openai.AsyncOpenAI, task: str,
                    timeout_ms: int | None = None) -> str:
    headers = {**CHAT_HEADERS, "x-slorouter-task": task}
    if timeout_ms is not None:
        headers["x-slorouter-timeout-ms"] = str(timeout_ms)
    try:
        await client.chat.completions.create(model="auto", messages=MESSAGES,  # type: ignore
                                             extra_headers=headers)
    except openai.APIError as exc:
        return type(exc).__name__
    return "done"


def _burst_round(chat: openai.AsyncOpenAI,
                 impatient: openai.AsyncOpenAI) -> list[Awaitable[str]]:
    """One of each way an attempt can end (`impatient` gives up after 0.3 s)."""
    return [
        _complete(chat, "chat"),  # hedged when the tail is slow; the loser is cancelled
        _stream(chat, "chat"),
        _stream(chat, "chat", leave_after=1),  # the client leaves mid-stream
        _stream(chat, "summarization"),  # hang (or skip it) → cut stream or calm
        _complete(impatient, "summarization"),  # the client leaves during the call
        _stream(chat, "summarization", timeout_ms=150),  # the deadline passes in an attempt
        _stream(chat, "extraction"),  # cut mid-stream, or 5xx retried on `flaky`
        _complete(chat, "extraction", timeout_ms=200),
    ]


def test_in_flight_counts_return_to_zero_after_a_burst(burst_router: Running) -> None:
    """Hedges (winner and loser), retries, fallbacks, streams cut by the upstream, clients
    leaving during the call and mid-stream, deadlines: afterwards no deployment has an attempt
    in flight, and none ever had more than its `max_in_flight`."""
    async def burst() -> list[str]:
        async with _client(burst_router) as chat, _client(burst_router, 0.3) as impatient:
            for _ in range(WARM_UP_ROUNDS):  # the hedge delay needs answers on `tail` first
                await asyncio.gather(*(_complete(chat, "chat") for _ in range(10)))
            async def round_(i: int) -> list[str]:  # rounds overlap, a new one every 150 ms
                await asyncio.sleep(i * 0.15)
                return list(await asyncio.gather(*_burst_round(chat, impatient)))
            rounds = await asyncio.gather(*(round_(i) for i in range(BURST_ROUNDS)))
            return [ending for r in rounds for ending in r]

    with BreakerWatch(burst_router.base_url, period_s=0.01) as watch:
        endings = run(burst())
    assert "done" in endings and "left" in endings, endings
    assert any(e not in ("done", "left") for e in endings), endings  # some failed
    peak = watch.peak_in_flight
    assert peak.get("hang") == BURST_CAPS["hang"], peak  # it filled up
    assert not {name: n for name, n in peak.items() if n > BURST_CAPS[name]}, peak
    run(_until(lambda: not any(attempts_in_flight(burst_router.base_url).values())))
    assert attempts_in_flight(burst_router.base_url) == dict.fromkeys(sorted(BURST_CAPS), 0)
    metrics = httpx.get(f"{burst_router.base_url}/metrics", timeout=10).text
    counted = {name: _counter(metrics, name) for name in
               ("slorouter_hedges", "slorouter_retries", "slorouter_fallbacks")}
    skipped = [line for line in metrics.splitlines()  # why a hedge due was not sent, if any
               if line.startswith("slorouter_hedges_skipped_total")]
    # the race ran (a loser cancelled), retries, fallbacks
    assert all(counted.values()), (counted, skipped)


def _counter(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))

