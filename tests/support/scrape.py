"""What tests read from a running router's `GET /metrics` (Prometheus text)."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

TPOT = "gen_ai_server_time_per_output_token_seconds"


async def tpot_histogram(base_url: str) -> tuple[float, float]:
    """The router's TPOT histogram (`gen_ai.server.time_per_output_token`): count and sum, over
    every label set."""
    async with aiohttp.ClientSession() as session, \
            session.get(f"{base_url}/metrics") as response:
        text = await response.text()
    family = next(f for f in text_string_to_metric_families(text) if f.name == TPOT)
    count = sum(s.value for s in family.samples if s.name.endswith("_count"))
    total = sum(s.value for s in family.samples if s.name.endswith("_sum"))
    return count, total


Counts = dict[tuple[tuple[str, str], ...], float]


async def counter_values(base_url: str, family: str) -> Counts:
    """A counter's values (`…_total`) by label set (its sorted label pairs)."""
    async with aiohttp.ClientSession() as session, \
            session.get(f"{base_url}/metrics") as response:
        text = await response.text()
    found = next((f for f in text_string_to_metric_families(text) if f.name == family), None)
    return {tuple(sorted(s.labels.items())): s.value for s in getattr(found, "samples", [])
            if s.name.endswith("_total")}


def counts_added(before: Counts, after: Counts) -> Counts:
    """What changed between two readings of `counter_values`."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
