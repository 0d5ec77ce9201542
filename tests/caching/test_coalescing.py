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

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.caching.conftest import Gateway
from tests.caching.service import Caller, SimStats, unique_messages

BURST = 20


def _coalesced(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    line = next(line for line in text.splitlines()
                if line.startswith("slorouter_cache_events") and 'kind="coalesced"' in line)
    return float(line.rsplit(" ", 1)[1])


def test_a_burst_of_identical_requests_goes_upstream_once(gateway: Gateway, caller: Caller,
                                                          sim_stats: SimStats) -> None:
    messages = unique_messages("herd")
    before, coalesced = sim_stats.requests("herd"), _coalesced(gateway.base_url)
    with ThreadPoolExecutor(BURST) as pool:
        seen = list(pool.map(lambda _: caller.chat(messages, model="herd"), range(BURST)))
    assert [s.status for s in seen] == [200] * BURST
    assert sim_stats.requests("herd") - before == 1
    assert sorted(s.cache or "" for s in seen) == ["hit"] * (BURST - 1) + ["miss"]
    assert len({s.content for s in seen}) == 1 and seen[0].content
    assert _coalesced(gateway.base_url) - coalesced == BURST - 1


def test_identical_streams_do_not_wait_for_one_another(gateway: Gateway, caller: Caller,
                                                       sim_stats: SimStats) -> None:
    messages = unique_messages("herd-stream")
    before = sim_stats.requests("herd")
    with ThreadPoolExecutor(5) as pool:
        seen = list(pool.map(lambda _: caller.chat(messages, model="herd", stream=True),
                             range(5)))
    assert [(s.status, s.error) for s in seen] == [(200, None)] * 5
    assert sim_stats.requests("herd") - before == 5
