"""Answers streamed from a stored body (cache hits, `Idempotency-Key` replays) end like any
other request: their admission slot is given back and their outcome is recorded.

The service admits at most 2 interactive requests at once with no queue, so a slot kept by a
finished stream would show as a 503 `overloaded` on a later request; `/metrics` counts the
requests whose outcome was recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.caching.service import (
    KEYS_ENV,
    Caller,
    disk_cache_block,
    policies_yaml,
    router_yaml,
    unique_messages,
)
from tests.support.services import Running, start_router

ADMISSION = """  reliability:
    interactive: {max_concurrency: 2, max_queue: 0, max_queue_wait_s: 0}
"""


@pytest.fixture
def tight(sim: Running, tmp_path: Path) -> Iterator[Caller]:
    config = router_yaml(sim.base_url, disk_cache_block(str(tmp_path / "cache")),
                         policies_yaml()).replace("  cache:\n", ADMISSION + "  cache:\n", 1)
    router = start_router(tmp_path, config, env=KEYS_ENV)
    calling = Caller(router.base_url)
    yield calling
    calling.close()
    router.stop()


def _recorded(caller: Caller) -> float:
    """Requests whose outcome the router recorded (`gen_ai.server.request.duration` count)."""
    text = httpx.get(f"{caller.base_url}/metrics", timeout=5).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "gen_ai_server_request_duration_seconds_count")


def test_streamed_cache_hits_give_back_their_slot_and_are_recorded(tight: Caller) -> None:
    messages = unique_messages("streamed-hits")
    first = tight.chat(messages)
    hits = [tight.chat(messages, stream=True) for _ in range(4)]
    assert first.cache == "miss"
    assert [(h.status, h.cache, h.error) for h in hits] == [(200, "hit", None)] * 4
    assert tight.chat(unique_messages("after-hits")).status == 200
    assert _recorded(tight) == 6


def test_streamed_idempotent_replays_give_back_their_slot_and_are_recorded(
        tight: Caller) -> None:
    messages = unique_messages("streamed-replays")
    key = {"idempotency-key": "replayed-stream-1", "cache-control": "no-store"}
    first = tight.chat(messages, stream=True, headers=key)
    replays = [tight.chat(messages, stream=True, headers=key) for _ in range(4)]
    assert (first.status, first.error) == (200, None)
    assert [(r.status, r.headers.get("x-slorouter-idempotent-replay")) for r in replays] == [
        (200, "true")] * 4
    assert tight.chat(unique_messages("after-replays")).status == 200
    assert _recorded(tight) == 6
