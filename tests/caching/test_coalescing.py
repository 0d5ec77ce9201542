"""Identical requests at once are computed once per process, on both backends.

Twenty identical non-streamed temperature-0 requests sent together to a model that takes
400 ms reach the upstream once: the first leads, the others wait for its answer and are
served it from the cache (`x-slorouter-cache: hit`, counted as `coalesced` in `/metrics`),
each with the same content. Streams never wait (their first token would wait for a whole
answer): five identical streams make five upstream calls. Before, every request of a burst
went upstream (a race audit: 100 identical requests, 100 calls).

Real processes: the package's simulator and one router per backend (tests/caching/conftest.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.caching.conftest import Gateway
from tests.caching.service import DEFAULT_HINTS, KEY_A, Caller, SimStats, unique_messages

BURST = 20


def coalesced(base_url: str) -> float:
    """The router's count of coalesced cache events (`/metrics`)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    line = next(line for line in text.splitlines()
                if line.startswith("slorouter_cache_events") and 'kind="coalesced"' in line)
    return float(line.rsplit(" ", 1)[1])


def test_a_burst_of_identical_requests_goes_upstream_once(gateway: Gateway, caller: Caller,
                                                          sim_stats: SimStats) -> None:
    messages = unique_messages("herd")
    before, coalesced_before = sim_stats.requests("herd"), coalesced(gateway.base_url)
    with ThreadPoolExecutor(BURST) as pool:
        seen = list(pool.map(lambda _: caller.chat(messages, model="herd"), range(BURST)))
    assert [s.status for s in seen] == [200] * BURST
    assert sim_stats.requests("herd") - before == 1
    assert sorted(s.cache or "" for s in seen) == ["hit"] * (BURST - 1) + ["miss"]
    assert len({s.content for s in seen}) == 1 and seen[0].content
    assert coalesced(gateway.base_url) - coalesced_before == BURST - 1


def test_identical_streams_do_not_wait_for_one_another(gateway: Gateway, caller: Caller,
                                                       sim_stats: SimStats) -> None:
    messages = unique_messages("herd-stream")
    before = sim_stats.requests("herd")
    with ThreadPoolExecutor(5) as pool:
        seen = list(pool.map(lambda _: caller.chat(messages, model="herd", stream=True),
                             range(5)))
    assert [(s.status, s.error) for s in seen] == [(200, None)] * 5
    assert sim_stats.requests("herd") - before == 5


def _running(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("slorouter_admission_requests")
               and 'state="running"' in line)


def test_followers_whose_clients_left_give_their_slots_back(gateway: Gateway, caller: Caller,
                                                          sim_stats: SimStats) -> None:
    """Five identical requests wait for a leader that takes 2 s; their clients give up after
    0.3 s. Their admission slots are given back then, not when the leader ends (they were
    held, for clients long gone, up to half the request's deadline), and the leader's own
    answer still comes."""
    sim_stats.set_profile("herd", ttft_p50_ms=2000, ttft_p99_ms=2000)
    try:
        messages = unique_messages("herd-gone")
        with ThreadPoolExecutor(6) as pool:
            leader = pool.submit(caller.chat, messages, model="herd")
            time.sleep(0.1)  # the leader leads
            gone = list(pool.map(lambda _: _gives_up(gateway.base_url, messages), range(5)))
            assert gone == [True] * 5
            time.sleep(0.3)
            assert _running(gateway.base_url) <= 1  # the leader's slot alone
            assert leader.result().status == 200
    finally:
        sim_stats.set_profile("herd", ttft_p50_ms=400, ttft_p99_ms=400)


def _gives_up(base_url: str, messages: list[dict[str, str]]) -> bool:
    """A client that gives up after 0.3 s without telling the router (no timeout header, as
    a plain HTTP client): True when it did."""
    try:
        httpx.post(f"{base_url}/v1/chat/completions", timeout=0.3, json={
            "model": "herd", "messages": messages, "temperature": 0},
            headers={"authorization": f"Bearer {KEY_A}", **DEFAULT_HINTS})
    except httpx.TimeoutException:
        return True
    return False
