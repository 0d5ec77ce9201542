"""A stream's waits end at its head deadline, the time its SDK waits for the first chunk.

openai-python sends its timeout as `x-stainless-read-timeout`: a stream's head (its first
chunk) must come within it (less the router's headroom), else the SDK gives up and retries on
its own. Three waits before the head were bounded by the whole answer's deadline instead
(`server.request_timeout_s`), so a streamed request kept its client past its SDK's timeout
where the same request not streamed was answered in time (the reliability audit of
2026-12-07): waiting out an upstream's `Retry-After`, waiting in the admission queue, and a
duplicate waiting for the first holder of its Idempotency-Key.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.scenarios import (
    API_KEY,
    MESSAGES,
    TENANT_ENV,
    Dep,
    SimCounters,
    router_yaml,
    steady,
)
from tests.support.services import Running, gateway_and_simulator

pytestmark = pytest.mark.integration

SDK_TIMEOUT_S = 2.0  # the SDK's; the router's head deadline is 1.8 s
AUTH = {"authorization": f"Bearer {API_KEY}", "x-slorouter-task": "chat"}
SDK = {**AUTH, "x-stainless-read-timeout": str(SDK_TIMEOUT_S)}
MODELS = {
    # a 429 1.2 s in, asking for 0.9 s (under the 1 s the router waits out at most): waiting it
    # out ends past the head deadline
    "throttled": steady(20, error_rate_429=1.0, retry_after_s=0.9, error_delay_ms=1200),
    "slow": steady(5000),
    # first token at once, then 40 tokens 100 ms apart: a stream of about 4 s
    "long": steady(20, tokens=40, tpot_ms=100),
}
LEASE_S = 1.0  # `server.idempotency_lease_s`, its least
RELIABILITY = """    background:
      max_concurrency: 1
      max_queue: 4
      max_queue_wait_s: 5
    breaker: {consecutive_failures: 1000000, min_volume: 1000000, holds_after: 1000000}"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Running, Running]]:
    directory = tmp_path_factory.mktemp("stream-head-waits")
    deps = [Dep("throttled", "throttled"), Dep("slow", "slow"), Dep("long", "long")]
    config = router_yaml("{sim}", deps,
                         {"throttled": ["throttled"], "slow": ["slow"], "long": ["long"]},
                         reliability=RELIABILITY)
    config = config.replace("server:\n", f"server:\n  idempotency_lease_s: {LEASE_S}\n", 1)
    with gateway_and_simulator(directory, MODELS, lambda sim: config.replace("{sim}", sim),
                               TENANT_ENV) as started:
        yield started


async def _timed(http: httpx.AsyncClient, headers: dict[str, str], model: str,
                 stream: bool) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await http.post("/v1/chat/completions", headers=headers,
                               json={"model": model, "messages": MESSAGES, "stream": stream})
    return response, time.monotonic() - started


def _code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def test_a_retry_after_past_the_head_deadline_is_answered_at_once(
        stack: tuple[Running, Running]) -> None:
    """The upstream's 429 asks for 0.9 s at 1.2 s in: waiting it out passes the stream's head
    deadline, so the 429 is answered at once, as a whole answer's is (it slept 0.9 s, past the
    SDK's 2 s timeout)."""
    router, sim = stack
    counters = SimCounters(sim.base_url)

    async def run() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
            return [await _timed(http, SDK, "throttled", stream) for stream in (False, True)]

    before = counters.value("throttled")
    answers = asyncio.run(run())
    for response, elapsed in answers:
        assert response.status_code == 429 and _code(response) == "rate_limited", response.text
        assert elapsed < SDK_TIMEOUT_S - 0.2, elapsed  # about 1.2 s: no wait
    assert counters.value("throttled") - before == 2  # one call each, no retry


def test_a_queued_stream_is_refused_before_its_sdk_gives_up(
        stack: tuple[Running, Running]) -> None:
    """The background pool's one slot is held for 5 s: a queued request is refused with the
    queue's 503 and `Retry-After` once its client's wait would end, a stream's at its head
    deadline (it stayed queued to the whole deadline and got a 504, its SDK long gone)."""
    router, _ = stack
    background = {**SDK, "x-slorouter-priority": "background"}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
            holder = asyncio.create_task(
                _timed(http, {**AUTH, "x-slorouter-priority": "background"}, "slow", False))
            await asyncio.sleep(0.5)
            try:
                return [(await _timed(http, background, "slow", stream))[0]
                        for stream in (False, True)]
            finally:
                await holder

    for response in asyncio.run(run()):
        assert response.status_code == 503 and _code(response) == "queue_timeout", response.text
        assert response.headers.get("retry-after") is not None


def test_a_streamed_duplicate_is_told_its_key_is_in_flight(
        stack: tuple[Running, Running]) -> None:
    """The first holder of an Idempotency-Key takes 5 s: a duplicate is answered 409
    `idempotency_key_in_flight` once its client's wait would end, a stream's at its head
    deadline (it waited for the holder and was replayed at 5 s, its SDK gone at 2 s)."""
    router, _ = stack

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
            answers = []
            for stream in (False, True):
                key = {"idempotency-key": str(uuid.uuid4())}
                holder = asyncio.create_task(_timed(http, {**AUTH, **key}, "slow", False))
                await asyncio.sleep(0.5)
                answers.append((await _timed(http, {**SDK, **key}, "slow", stream))[0])
                first, _ = await holder
                assert first.status_code == 200, first.text
            return answers

    for response in asyncio.run(run()):
        assert response.status_code == 409, response.text
        assert _code(response) == "idempotency_key_in_flight"


def test_a_keyed_stream_keeps_its_key_past_its_head_deadline(
        stack: tuple[Running, Running]) -> None:
    """A keyed stream under a 2 s SDK timeout runs about 4 s: its key stays held to its end
    and a duplicate sent at 3.3 s waits and replays it. The lease's renewals stopped at the
    head deadline (1.8 s), the 1 s lease lapsed mid-stream and the duplicate ran the request a
    second time upstream (the reliability audit of 2026-12-07: an action ran twice)."""
    router, sim = stack
    counters = SimCounters(sim.base_url)
    key = {"idempotency-key": str(uuid.uuid4())}

    async def run() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
            holder = asyncio.create_task(_timed(http, {**SDK, **key}, "long", True))
            await asyncio.sleep(1.8 + 1.5 * LEASE_S)
            assert not holder.done()  # still streaming
            duplicate, _ = await _timed(http, {**AUTH, **key}, "long", False)
            first, elapsed = await holder
            assert elapsed > 3.0, elapsed
            return first, duplicate

    before = counters.value("long")
    first, duplicate = asyncio.run(run())
    assert first.status_code == 200 and "[DONE]" in first.text, first.text
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.headers.get("x-slorouter-idempotent-replay") == "true"
    assert counters.value("long") - before == 1  # the stream's call only
