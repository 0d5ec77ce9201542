"""What a `GET /metrics` scrape costs the event loop, the old way beside the new.

    python -m bench.metrics_scrape [--series 2000] [--scrapes 5]

Fills a `MetricRegistry` as a large configuration does (five histograms of 17 buckets, each with
`--series` label sets: models, deployments, tasks, cache states, errors; the scale audit's router
with 50 deployments held about 2,000 a histogram and wrote 5-10 MB), then, `--scrapes` times
each, side by side:

* **inline prometheus_client** (the scrape until 2026-12-07): collect and `render` on the loop;
* **off-loop text_of** (the scrape now): the gauges read on the loop, the rest collected and
  written (`text_of`) on a worker thread.

For each it prints the text's size, the time to write it, and the event loop's longest stall
while it was written: a task on the loop sleeps 1 ms at a time and records how late it wakes
(the requests a router serves meanwhile wait that long). The thread still takes the interpreter
from the loop, which gets it back every switch interval (5 ms), so the loop slows but never
stands still for the whole text.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable

from router.telemetry.aggregate import MetricRegistry
from router.telemetry.prometheus import text_of
from tests.support.prometheus_reference import render

BOUNDS = tuple(0.01 * 2 ** k for k in range(17))


def filled_registry(series: int, seed: int = 0) -> MetricRegistry:
    rng = random.Random(seed)
    registry = MetricRegistry()
    for index in range(5):
        histogram = registry.histogram(f"gen_ai.bench.h{index}", BOUNDS, unit="s")
        for s in range(series):
            labels = {"gen_ai.request.model": f"model-{s % 50}",
                      "gen_ai.response.model": f"deployment-{s % 40}",
                      "gen_ai.provider.name": ("openai", "anthropic")[s % 2],
                      "slorouter.task": f"task-{s % 11}",
                      "slorouter.cache": ("hit", "miss", "bypass")[s % 3],
                      "error.type": "ProviderError" if s % 7 == 0 else "none"}
            for _ in range(3):
                histogram.record(rng.random() * 5, labels)
    return registry


async def _longest_stall(work: Callable[[], Awaitable[bytes]]) -> tuple[float, float, int]:
    """(seconds the work took, the loop's longest late wake-up meanwhile, bytes written)."""
    done = False
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while not done:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    ticking = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    body = await work()
    took = time.perf_counter() - started
    done = True
    await ticking
    return took, worst, len(body)


async def _run(series: int, scrapes: int) -> None:
    registry = filled_registry(series)

    async def inline() -> bytes:
        return render(registry)

    async def off_loop() -> bytes:  # as `metrics_endpoint` does
        gauges = registry.gauge_snapshots()
        return await asyncio.to_thread(lambda: text_of(registry.collect(gauges=gauges)))

    print(f"{series} label sets in each of 5 histograms of {len(BOUNDS)} buckets; "
          f"{scrapes} scrapes each, alternating")
    results: dict[str, list[tuple[float, float, int]]] = {"inline prometheus_client": [],
                                                          "off-loop text_of": []}
    for _ in range(scrapes):
        results["inline prometheus_client"].append(await _longest_stall(inline))
        results["off-loop text_of"].append(await _longest_stall(off_loop))
    print(f"{'scrape':26} {'MB':>6} {'write ms p50':>13} {'max':>7} "
          f"{'loop stall ms p50':>18} {'max':>7}")
    for name, runs in results.items():
        took = [1e3 * r[0] for r in runs]
        stalls = [1e3 * r[1] for r in runs]
        print(f"{name:26} {runs[0][2] / 1e6:6.2f} {statistics.median(took):13.1f} "
              f"{max(took):7.1f} {statistics.median(stalls):18.1f} {max(stalls):7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(_run(args.series, args.scrapes))


if __name__ == "__main__":
    main()
